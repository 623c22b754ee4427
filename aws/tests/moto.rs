//! The client against moto's EC2 (a real server of the EC2 Query API on loopback): every
//! call, in the order the EC2 provider makes them, then everything deleted in dependency
//! order and nothing left behind.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use envc_aws::{ErrorKind, Filter, InstanceState, RunInstance, Tags};
use support::{runtime, ssh_public_key, Moto};

const DEBIAN: &str = "136693071363";
const POLL: Duration = Duration::from_millis(100);
const WAIT: Duration = Duration::from_secs(60);

#[test]
fn every_call_against_moto() {
    let moto = Moto::start(None);
    let ec2 = moto.client("AKIDTEST", "secret");
    runtime().block_on(async {
        let owners = vec![DEBIAN.to_string()];

        // Images: the fixture's three bookworm amd64 builds, not trixie's or arm64's.
        let mut images = ec2
            .describe_images(&owners, "debian-12-amd64-*")
            .await
            .unwrap();
        images.sort_by(|a, b| a.creation_date.cmp(&b.creation_date));
        let names: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "debian-12-amd64-20260901-1001",
                "debian-12-amd64-20261001-1101",
                "debian-12-amd64-20261101-1201"
            ]
        );
        let newest = images.last().unwrap().clone();
        assert_eq!(newest.id, "ami-0d2c5a1f3e4b61101");
        assert_eq!(newest.owner_id, DEBIAN);
        assert_eq!(newest.architecture, "x86_64");
        assert_eq!(newest.root_device_name.as_deref(), Some("/dev/xvda"));
        assert!(
            newest.creation_date.starts_with("2026-11-01T12:25:00"),
            "{}",
            newest.creation_date
        );
        let arm = ec2
            .describe_images(&owners, "debian-12-arm64-*")
            .await
            .unwrap();
        assert_eq!(arm.len(), 1);
        assert_eq!(arm[0].architecture, "arm64");
        assert!(ec2
            .describe_images(&["123456789012".into()], "debian-*")
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            ec2.describe_image(&newest.id).await.unwrap(),
            Some(newest.clone())
        );
        assert_eq!(
            ec2.describe_image("ami-00000000000000000").await.unwrap(),
            None
        );

        let tags: Tags = [
            ("envc:env".to_string(), "aws-test".to_string()),
            ("Name".to_string(), "web".to_string()),
        ]
        .into_iter()
        .collect();
        let mine = [Filter::tag("envc:env", "aws-test")];

        // The network.
        let vpc = ec2.create_vpc("10.77.0.0/16", &tags).await.unwrap();
        let vpcs = ec2.describe_vpcs(&mine).await.unwrap();
        assert_eq!(vpcs.len(), 1);
        assert_eq!(
            (vpcs[0].id.as_str(), vpcs[0].cidr.as_str()),
            (vpc.as_str(), "10.77.0.0/16")
        );
        assert_eq!(vpcs[0].tags, tags);

        let subnet = ec2
            .create_subnet(&vpc, "10.77.1.0/24", &tags)
            .await
            .unwrap();
        ec2.map_public_ip_on_launch(&subnet).await.unwrap();
        let subnets = ec2
            .describe_subnets(std::slice::from_ref(&subnet), &[])
            .await
            .unwrap();
        assert_eq!(subnets.len(), 1);
        assert_eq!(subnets[0].vpc_id, vpc);
        assert_eq!(subnets[0].cidr, "10.77.1.0/24");
        assert!(
            subnets[0].availability_zone.starts_with("us-east-1"),
            "{:?}",
            subnets[0]
        );
        assert_eq!(subnets[0].tags, tags);
        assert_eq!(ec2.describe_subnets(&[], &mine).await.unwrap(), subnets);

        let igw = ec2.create_internet_gateway(&tags).await.unwrap();
        ec2.attach_internet_gateway(&igw, &vpc).await.unwrap();
        let igws = ec2.describe_internet_gateways(&mine).await.unwrap();
        assert_eq!(igws.len(), 1);
        assert_eq!(
            (igws[0].id.as_str(), igws[0].attached_vpcs.clone()),
            (igw.as_str(), vec![vpc.clone()])
        );

        let rt = ec2.create_route_table(&vpc, &tags).await.unwrap();
        ec2.create_default_route(&rt, &igw).await.unwrap();
        let association = ec2.associate_route_table(&rt, &subnet).await.unwrap();
        let rts = ec2.describe_route_tables(&mine).await.unwrap();
        assert_eq!(
            rts.len(),
            1,
            "only ours is tagged, not the VPC's main table: {rts:?}"
        );
        assert_eq!(rts[0].id, rt);
        assert_eq!(rts[0].vpc_id, vpc);
        assert_eq!(
            rts[0].associations,
            vec![(association.clone(), Some(subnet.clone()), false)]
        );
        // The VPC's main table, untagged, is there too.
        let all = ec2
            .describe_route_tables(&[Filter::new("vpc-id", [vpc.clone()])])
            .await
            .unwrap();
        assert!(
            all.iter().any(|t| t.associations.iter().any(|a| a.2)),
            "{all:?}"
        );

        let sg = ec2
            .create_security_group("envc-web", "envc: ssh in", &vpc, &tags)
            .await
            .unwrap();
        let anywhere = vec!["0.0.0.0/0".to_string()];
        ec2.allow_tcp_in(&sg, 22, &anywhere).await.unwrap();
        // The same rule again is fine.
        ec2.allow_tcp_in(&sg, 22, &anywhere).await.unwrap();
        let sgs = ec2
            .describe_security_groups(std::slice::from_ref(&sg), &[])
            .await
            .unwrap();
        assert_eq!(sgs.len(), 1);
        assert_eq!(
            (sgs[0].name.as_str(), sgs[0].vpc_id.as_deref()),
            ("envc-web", Some(vpc.as_str()))
        );
        assert_eq!(sgs[0].tags, tags);
        let again = ec2
            .create_security_group("envc-web", "envc: ssh in", &vpc, &tags)
            .await
            .unwrap_err();
        assert_eq!(again.kind(), ErrorKind::Conflict, "{again}");

        let public_key = ssh_public_key();
        ec2.import_key_pair("envc-web", &public_key, &tags)
            .await
            .unwrap();
        let keys = ec2
            .describe_key_pairs(&[Filter::new("key-name", ["envc-web"])])
            .await
            .unwrap();
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].name, "envc-web");
        assert!(
            keys[0].id.as_deref().unwrap_or("").starts_with("key-"),
            "{keys:?}"
        );
        assert!(keys[0].fingerprint.is_some(), "{keys:?}");
        assert_eq!(keys[0].tags, tags);
        assert_eq!(ec2.describe_key_pairs(&mine).await.unwrap(), keys);
        let dup = ec2
            .import_key_pair("envc-web", &public_key, &tags)
            .await
            .unwrap_err();
        assert_eq!(dup.kind(), ErrorKind::Conflict, "{dup}");

        // The machine.
        let user_data = "#cloud-config\nhostname: web\n# ünïcode & <xml>\n";
        let launched = ec2
            .run_instance(&RunInstance {
                image_id: newest.id.clone(),
                instance_type: "t3.micro".into(),
                subnet_id: Some(subnet.clone()),
                security_group_ids: vec![sg.clone()],
                key_name: Some("envc-web".into()),
                user_data: Some(user_data.into()),
                client_token: Some("envc-aws-test-1".into()),
                tags: tags.clone(),
                root_volume: Some(("/dev/xvda".into(), 12)),
                associate_public_ip: true,
            })
            .await
            .unwrap();
        let id = launched.id.clone();
        assert_eq!(launched.image_id, newest.id);
        assert_eq!(launched.instance_type, "t3.micro");
        assert_eq!(launched.subnet_id.as_deref(), Some(subnet.as_str()));
        assert_eq!(launched.vpc_id.as_deref(), Some(vpc.as_str()));
        assert_eq!(launched.key_name.as_deref(), Some("envc-web"));
        assert_eq!(launched.security_group_ids, vec![sg.clone()]);

        let running = ec2
            .wait_for_state(&id, &[InstanceState::Running], POLL, WAIT)
            .await
            .unwrap();
        assert_eq!(running.tags, tags);
        assert!(
            running
                .private_ip
                .as_deref()
                .unwrap_or("")
                .starts_with("10.77.1."),
            "{running:?}"
        );
        assert!(
            running.public_ip.is_some(),
            "a public address was asked for: {running:?}"
        );
        let by_tag = ec2.describe_instances(&[], &mine).await.unwrap();
        assert_eq!(by_tag, vec![running.clone()]);
        assert_eq!(
            ec2.instance_user_data(&id).await.unwrap().as_deref(),
            Some(user_data)
        );

        ec2.stop_instance(&id).await.unwrap();
        ec2.wait_for_state(&id, &[InstanceState::Stopped], POLL, WAIT)
            .await
            .unwrap();
        ec2.modify_instance_type(&id, "t3.small").await.unwrap();
        ec2.start_instance(&id).await.unwrap();
        let resized = ec2
            .wait_for_state(&id, &[InstanceState::Running], POLL, WAIT)
            .await
            .unwrap();
        assert_eq!(resized.instance_type, "t3.small");

        // What is in use cannot go (what moto checks: an attached gateway, an associated
        // route table, a VPC with subnets).
        for in_use in [
            ec2.delete_internet_gateway(&igw).await.unwrap_err(),
            ec2.delete_route_table(&rt).await.unwrap_err(),
            ec2.delete_vpc(&vpc).await.unwrap_err(),
        ] {
            assert_eq!(in_use.kind(), ErrorKind::DependencyViolation, "{in_use}");
        }

        ec2.terminate_instance(&id).await.unwrap();
        let gone = ec2
            .wait_for_state(&id, &[InstanceState::Terminated], POLL, WAIT)
            .await
            .unwrap();
        assert_eq!(gone.state, InstanceState::Terminated);
        // Waiting for a terminated instance to run fails at once, with its state.
        let never = ec2
            .wait_for_state(&id, &[InstanceState::Running], POLL, WAIT)
            .await
            .unwrap_err();
        assert_eq!(
            never.to_string(),
            format!("instance {id} is terminated and will never be running")
        );

        // Everything goes, in dependency order.
        ec2.delete_key_pair("envc-web").await.unwrap();
        ec2.disassociate_route_table(&association).await.unwrap();
        ec2.delete_route_table(&rt).await.unwrap();
        ec2.detach_internet_gateway(&igw, &vpc).await.unwrap();
        ec2.delete_internet_gateway(&igw).await.unwrap();
        ec2.delete_security_group(&sg).await.unwrap();
        ec2.delete_subnet(&subnet).await.unwrap();
        ec2.delete_vpc(&vpc).await.unwrap();

        assert_eq!(ec2.describe_vpcs(&mine).await.unwrap(), vec![]);
        assert_eq!(ec2.describe_subnets(&[], &mine).await.unwrap(), vec![]);
        assert_eq!(ec2.describe_internet_gateways(&mine).await.unwrap(), vec![]);
        assert_eq!(ec2.describe_route_tables(&mine).await.unwrap(), vec![]);
        assert_eq!(
            ec2.describe_security_groups(&[], &mine).await.unwrap(),
            vec![]
        );
        assert_eq!(ec2.describe_key_pairs(&mine).await.unwrap(), vec![]);
        // EC2 shows a terminated instance for a while; nothing else of ours is left.
        let left: Vec<_> = ec2.describe_instances(&[], &mine).await.unwrap();
        assert!(
            left.iter().all(|i| i.state == InstanceState::Terminated),
            "{left:?}"
        );
        assert!(ec2.calls() > 50, "{}", ec2.calls());
    });
}

#[test]
fn an_unknown_image_is_not_found() {
    let moto = Moto::start(None);
    let ec2 = moto.client("AKIDTEST", "secret");
    runtime().block_on(async {
        let before = ec2.calls();
        let e = ec2
            .run_instance(&RunInstance {
                image_id: "ami-00000000000000000".into(),
                instance_type: "t3.micro".into(),
                ..RunInstance::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
        assert_eq!(e.code(), Some("InvalidAMIID.NotFound"));
        // A client error is not retried.
        assert_eq!(ec2.calls() - before, 1);
        let shown = e.to_string();
        assert!(
            shown.starts_with("EC2 RunInstances failed with InvalidAMIID.NotFound: ")
                && shown.contains("ami-00000000000000000"),
            "{shown}"
        );
        // Nothing was launched.
        assert!(ec2.describe_instances(&[], &[]).await.unwrap().is_empty());
    });
}
