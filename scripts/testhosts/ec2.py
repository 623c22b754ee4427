"""What the end-to-end tests of envc's `vm` machines on AWS ask of EC2 (moto's server), through
boto3: tests/support/cloud.rs runs it with the moto venv's python (scripts/s3-server --venv)
inside the test hosts' controller network namespace, where moto listens. boto3 finds the
server and the credentials in the environment (AWS_ENDPOINT_URL_EC2, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION; tests/support/servers.rs, Ec2Server::env).

    ec2.py boot-info INSTANCE_ID HOST_KEY_OUT
        What cloud-init reads when the instance boots. Prints `key value` lines: state,
        private (address), public (address, `-` if none), key-name (`-` if none), host-key
        (`given` or `none`), and one `authorized-key LINE` per key that cloud-init would
        authorize: the key pair's (KeyName) public key and each of the user data's
        `ssh_authorized_keys`. The user data, if any, must be `#cloud-config` YAML; its
        `ssh_keys: {ed25519_private: ..., ed25519_public: ...}` are written to HOST_KEY_OUT
        and HOST_KEY_OUT.pub (0600 / 0644) when present.
    ec2.py instances [NAME=VALUE[,VALUE...]]...
        One line per instance, sorted: `ID STATE TAGS` (TAGS: `k=v;k=v`, sorted; `-` if none).
        Each argument is a DescribeInstances filter.
    ec2.py terminate INSTANCE_ID...
        TerminateInstances.
    ec2.py stop INSTANCE_ID...
        StopInstances (the instances stay, stopped).
    ec2.py images
        The images of Debian's account (136693071363), sorted: `ID NAME ARCHITECTURE`.
    ec2.py describe-all
        The account's resources that a test creates or that envc makes, as sorted lines (see
        describe_all below): equal before a `create` and after the `destroy`, when the
        destroy left nothing.
    ec2.py create-test-instance HOST_KEY [AUTHORIZED_PUB]
        A VPC 10.0.0.0/16 with an internet gateway, a subnet 10.0.1.0/24 that maps public
        addresses, and an instance of the newest debian-12-amd64 image there, whose user
        data gives it the ed25519 host key HOST_KEY (HOST_KEY.pub beside it), as envc's
        does. With AUTHORIZED_PUB, that public key is imported as key pair `cloud-support`,
        which the instance gets. Prints the instance id.
"""

import base64
import os
import sys

import boto3
import yaml


def client():
    return boto3.client("ec2")


def tags_text(tags):
    pairs = sorted(f"{t['Key']}={t['Value']}" for t in tags or [])
    return ";".join(pairs) or "-"


def boot_info(instance_id, key_out):
    ec2 = client()
    reservations = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    instance = reservations[0]["Instances"][0]
    attr = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    encoded = attr.get("UserData", {}).get("Value")
    host_key = "none"
    authorized = []
    if encoded:
        text = base64.b64decode(encoded).decode("utf-8")
        if not text.startswith("#cloud-config"):
            sys.exit(f"ec2.py: {instance_id}'s user data is not #cloud-config:\n{text[:200]}")
        config = yaml.safe_load(text) or {}
        keys = config.get("ssh_keys") or {}
        private = keys.get("ed25519_private")
        if private:
            fd = os.open(key_out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(private if private.endswith("\n") else private + "\n")
            public = keys.get("ed25519_public")
            if public:
                with open(key_out + ".pub", "w") as f:
                    f.write(public.strip() + "\n")
            host_key = "given"
        authorized += [k.strip() for k in config.get("ssh_authorized_keys") or []]
    if instance.get("KeyName"):
        pairs = ec2.describe_key_pairs(KeyNames=[instance["KeyName"]], IncludePublicKey=True)
        authorized = [p["PublicKey"].strip() for p in pairs["KeyPairs"]] + authorized
    print("state", instance["State"]["Name"])
    print("private", instance.get("PrivateIpAddress") or "-")
    print("public", instance.get("PublicIpAddress") or "-")
    print("key-name", instance.get("KeyName") or "-")
    print("host-key", host_key)
    for key in authorized:
        print("authorized-key", key)


def instances(filters):
    ec2 = client()
    parsed = []
    for f in filters:
        name, _, values = f.partition("=")
        parsed.append({"Name": name, "Values": values.split(",")})
    lines = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=parsed):
        for reservation in page["Reservations"]:
            for i in reservation["Instances"]:
                lines.append(f"{i['InstanceId']} {i['State']['Name']} {tags_text(i.get('Tags'))}")
    for line in sorted(lines):
        print(line)


def terminate(ids):
    client().terminate_instances(InstanceIds=ids)


def stop(ids):
    client().stop_instances(InstanceIds=ids)


def images():
    ec2 = client()
    found = ec2.describe_images(Owners=["136693071363"])["Images"]
    for line in sorted(f"{i['ImageId']} {i['Name']} {i['Architecture']}" for i in found):
        print(line)


def permissions_text(perms):
    out = []
    for p in perms:
        ports = f"{p.get('IpProtocol')}:{p.get('FromPort', '*')}-{p.get('ToPort', '*')}"
        sources = sorted(
            [r["CidrIp"] for r in p.get("IpRanges", [])]
            + [r["CidrIpv6"] for r in p.get("Ipv6Ranges", [])]
            + [g["GroupId"] for g in p.get("UserIdGroupPairs", [])]
        )
        out.append(f"{ports}<{','.join(sources)}>")
    return ",".join(sorted(out)) or "-"


def describe_all():
    ec2 = client()
    lines = []
    default_vpcs = set()
    for v in ec2.describe_vpcs()["Vpcs"]:
        if v.get("IsDefault"):
            default_vpcs.add(v["VpcId"])
            continue
        lines.append(f"vpc {v['VpcId']} {v['CidrBlock']} tags={tags_text(v.get('Tags'))}")
    for s in ec2.describe_subnets()["Subnets"]:
        if s["VpcId"] in default_vpcs:
            continue
        lines.append(
            f"subnet {s['SubnetId']} vpc={s['VpcId']} {s['CidrBlock']} "
            f"az={s['AvailabilityZone']} public-ip={s.get('MapPublicIpOnLaunch')} "
            f"tags={tags_text(s.get('Tags'))}"
        )
    for g in ec2.describe_internet_gateways()["InternetGateways"]:
        vpcs = sorted(a["VpcId"] for a in g.get("Attachments", []))
        if vpcs and set(vpcs) <= default_vpcs:
            continue
        lines.append(
            f"internet-gateway {g['InternetGatewayId']} vpcs={','.join(vpcs) or '-'} "
            f"tags={tags_text(g.get('Tags'))}"
        )
    for t in ec2.describe_route_tables()["RouteTables"]:
        associations = t.get("Associations", [])
        if any(a.get("Main") for a in associations):
            continue
        routes = sorted(
            f"{r.get('DestinationCidrBlock', r.get('DestinationIpv6CidrBlock'))}->"
            f"{r.get('GatewayId') or r.get('NatGatewayId') or r.get('InstanceId') or '?'}"
            for r in t.get("Routes", [])
        )
        subnets = sorted(a.get("SubnetId") or a.get("GatewayId") or "?" for a in associations)
        lines.append(
            f"route-table {t['RouteTableId']} vpc={t['VpcId']} routes={','.join(routes)} "
            f"associations={','.join(subnets) or '-'} tags={tags_text(t.get('Tags'))}"
        )
    for g in ec2.describe_security_groups()["SecurityGroups"]:
        if g["GroupName"] == "default":
            continue
        lines.append(
            f"security-group {g['GroupId']} name={g['GroupName']} vpc={g.get('VpcId', '-')} "
            f"in={permissions_text(g.get('IpPermissions', []))} "
            f"out={permissions_text(g.get('IpPermissionsEgress', []))} "
            f"tags={tags_text(g.get('Tags'))}"
        )
    for k in ec2.describe_key_pairs()["KeyPairs"]:
        lines.append(
            f"key-pair {k['KeyName']} type={k.get('KeyType', '-')} tags={tags_text(k.get('Tags'))}"
        )
    for r in ec2.describe_instances()["Reservations"]:
        for i in r["Instances"]:
            if i["State"]["Name"] == "terminated":
                continue
            groups = sorted(g["GroupId"] for g in i.get("SecurityGroups", []))
            lines.append(
                f"instance {i['InstanceId']} {i['State']['Name']} image={i['ImageId']} "
                f"type={i['InstanceType']} subnet={i.get('SubnetId', '-')} "
                f"groups={','.join(groups) or '-'} key={i.get('KeyName', '-')} "
                f"tags={tags_text(i.get('Tags'))}"
            )
    for line in sorted(lines):
        print(line)


def create_test_instance(host_key, authorized_pub=None):
    ec2 = client()
    key_name = {}
    if authorized_pub:
        with open(authorized_pub, "rb") as f:
            ec2.import_key_pair(KeyName="cloud-support", PublicKeyMaterial=f.read())
        key_name = {"KeyName": "cloud-support"}
    with open(host_key) as f:
        private = f.read()
    with open(host_key + ".pub") as f:
        public = f.read().strip()
    images = ec2.describe_images(
        Owners=["136693071363"],
        Filters=[{"Name": "name", "Values": ["debian-12-amd64-*"]}],
    )["Images"]
    image = max(images, key=lambda i: i["CreationDate"])
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    ec2.modify_subnet_attribute(SubnetId=subnet, MapPublicIpOnLaunch={"Value": True})
    user_data = "#cloud-config\n" + yaml.safe_dump(
        {"ssh_keys": {"ed25519_private": private, "ed25519_public": public}}
    )
    reservation = ec2.run_instances(
        ImageId=image["ImageId"],
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet,
        UserData=user_data,
        **key_name,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": "cloud-support"}]}
        ],
    )
    print(reservation["Instances"][0]["InstanceId"])


def main(argv):
    if len(argv) == 3 and argv[0] == "boot-info":
        boot_info(argv[1], argv[2])
    elif argv and argv[0] == "instances":
        instances(argv[1:])
    elif len(argv) >= 2 and argv[0] == "terminate":
        terminate(argv[1:])
    elif len(argv) >= 2 and argv[0] == "stop":
        stop(argv[1:])
    elif argv == ["images"]:
        images()
    elif argv == ["describe-all"]:
        describe_all()
    elif len(argv) in (2, 3) and argv[0] == "create-test-instance":
        create_test_instance(*argv[1:])
    else:
        sys.exit(f"ec2.py: unknown arguments {argv!r} (see the docstring)")


if __name__ == "__main__":
    main(sys.argv[1:])
