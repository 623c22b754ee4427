//! The network an EC2 machine is placed in: an existing subnet, used as it is, or a network
//! envc makes for the environment (a VPC, one subnet, an internet gateway with the default
//! route to it, a security group that lets SSH in), found again by its ownership tags, so
//! that a run killed half-way through making it finishes it instead of making a second one.
//! It is made with its first machine and deleted, in dependency order, with its last.

use envc_aws::{Ec2Client, Filter, Tags};

use super::{aws_error, owner_tags, TAG_ENVIRONMENT, TAG_NETWORK};
use crate::error::StepError;

/// Where a machine is placed, as the source says.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NetworkSpec {
    /// The name of the network envc makes (empty with `subnet`).
    pub name: String,
    pub cidr: String,
    /// An existing subnet's id.
    pub subnet: String,
    pub security_groups: Vec<String>,
    /// Who may reach SSH in a network envc makes; empty: from where envc runs.
    pub ssh_from: Vec<String>,
}

/// Where a machine was placed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub vpc: String,
    pub subnet: String,
    pub security_groups: Vec<String>,
    /// Whether envc made the network (so deletes it with its last machine).
    pub made: bool,
}

fn net_filters(env: &str, name: &str) -> Vec<Filter> {
    vec![
        Filter::tag(TAG_ENVIRONMENT, env),
        Filter::tag(TAG_NETWORK, name),
    ]
}

/// The network `spec` names, made (or finished) when envc makes it.
pub async fn ensure(
    ec2: &Ec2Client,
    env: &str,
    spec: &NetworkSpec,
    ssh_from: &[String],
) -> Result<Placed, StepError> {
    if !spec.subnet.is_empty() {
        let subnets = ec2
            .describe_subnets(std::slice::from_ref(&spec.subnet), &[])
            .await
            .map_err(|e| aws_error(e, &format!("subnet `{}`", spec.subnet)))?;
        let Some(subnet) = subnets.into_iter().next() else {
            return Err(StepError::with_hint(
                format!("subnet `{}` does not exist in {}", spec.subnet, ec2.region()),
                "name an existing subnet's id (`aws ec2 describe-subnets`), or let envc make the network: aws.network(…)",
            ));
        };
        return Ok(Placed {
            vpc: subnet.vpc_id,
            subnet: subnet.id,
            security_groups: spec.security_groups.clone(),
            made: false,
        });
    }
    let filters = net_filters(env, &spec.name);
    let tags: Tags = owner_tags(env)
        .into_iter()
        .chain([
            (TAG_NETWORK.to_string(), spec.name.clone()),
            ("Name".to_string(), format!("envc-{env}-{}", spec.name)),
        ])
        .collect();
    let what = format!("network `{}`", spec.name);
    let err = |e| aws_error(e, &what);
    let vpc = match ec2.describe_vpcs(&filters).await.map_err(err)?.first() {
        Some(v) => v.id.clone(),
        None => ec2.create_vpc(&spec.cidr, &tags).await.map_err(err)?,
    };
    let vpc_filter = Filter::new("vpc-id", [vpc.clone()]);
    let in_vpc = |mut f: Vec<Filter>| {
        f.push(vpc_filter.clone());
        f
    };
    let subnet = match ec2
        .describe_subnets(&[], &in_vpc(filters.clone()))
        .await
        .map_err(err)?
        .first()
    {
        Some(s) => s.id.clone(),
        None => {
            let s = ec2
                .create_subnet(&vpc, &subnet_cidr(&spec.cidr), &tags)
                .await
                .map_err(err)?;
            ec2.map_public_ip_on_launch(&s).await.map_err(err)?;
            s
        }
    };
    let igws = ec2
        .describe_internet_gateways(&filters)
        .await
        .map_err(err)?;
    let igw = match igws.first() {
        Some(g) => g.clone(),
        None => {
            let id = ec2.create_internet_gateway(&tags).await.map_err(err)?;
            envc_aws::InternetGateway {
                id,
                attached_vpcs: Vec::new(),
                tags: tags.clone(),
            }
        }
    };
    if !igw.attached_vpcs.contains(&vpc) {
        ec2.attach_internet_gateway(&igw.id, &vpc)
            .await
            .map_err(err)?;
    }
    let tables = ec2
        .describe_route_tables(&in_vpc(filters.clone()))
        .await
        .map_err(err)?;
    let table = match tables.first() {
        Some(t) => t.clone(),
        None => {
            let id = ec2.create_route_table(&vpc, &tags).await.map_err(err)?;
            ec2.create_default_route(&id, &igw.id).await.map_err(err)?;
            envc_aws::RouteTable {
                id,
                vpc_id: vpc.clone(),
                associations: Vec::new(),
                tags: tags.clone(),
            }
        }
    };
    if !(table.associations.iter()).any(|(_, s, _)| s.as_deref() == Some(subnet.as_str())) {
        ec2.associate_route_table(&table.id, &subnet)
            .await
            .map_err(err)?;
    }
    let groups = ec2
        .describe_security_groups(&[], &in_vpc(filters.clone()))
        .await
        .map_err(err)?;
    let group = match groups.first() {
        Some(g) => g.id.clone(),
        None => ec2
            .create_security_group(
                &format!("envc-{env}-{}", spec.name),
                &format!("SSH to envc environment {env}, network {}", spec.name),
                &vpc,
                &tags,
            )
            .await
            .map_err(err)?,
    };
    // Idempotent: a rule that exists is kept.
    ec2.allow_tcp_in(&group, 22, ssh_from).await.map_err(err)?;
    Ok(Placed {
        vpc,
        subnet,
        security_groups: vec![group],
        made: true,
    })
}

/// The subnet of a network envc makes: the first /24 of its CIDR (the whole CIDR when it
/// is that small already).
fn subnet_cidr(cidr: &str) -> String {
    match cidr.split_once('/') {
        Some((addr, len)) if len.parse::<u8>().is_ok_and(|l| l < 24) => format!("{addr}/24"),
        _ => cidr.to_string(),
    }
}

/// Deletes the network `name` envc made for `env`, if no machine is left in it: security
/// group, route table, internet gateway, subnet, VPC, in that order (each one's dependents
/// first). What is already gone is skipped; what envc did not tag is never touched.
pub async fn delete_if_unused(ec2: &Ec2Client, env: &str, name: &str) -> Result<bool, StepError> {
    let what = format!("network `{name}`");
    let err = |e| aws_error(e, &what);
    let filters = net_filters(env, name);
    let vpcs = ec2.describe_vpcs(&filters).await.map_err(err)?;
    for vpc in vpcs {
        let live = ec2
            .describe_instances(
                &[],
                &[
                    Filter::new("vpc-id", [vpc.id.clone()]),
                    Filter::new(
                        "instance-state-name",
                        ["pending", "running", "shutting-down", "stopping", "stopped"]
                            .map(String::from),
                    ),
                ],
            )
            .await
            .map_err(err)?;
        if !live.is_empty() {
            return Ok(false);
        }
        let in_vpc = |mut f: Vec<Filter>| {
            f.push(Filter::new("vpc-id", [vpc.id.clone()]));
            f
        };
        for g in ec2
            .describe_security_groups(&[], &in_vpc(filters.clone()))
            .await
            .map_err(err)?
        {
            ec2.delete_security_group(&g.id).await.map_err(err)?;
        }
        for t in ec2
            .describe_route_tables(&in_vpc(filters.clone()))
            .await
            .map_err(err)?
        {
            for (association, _, main) in &t.associations {
                if !main {
                    ec2.disassociate_route_table(association)
                        .await
                        .map_err(err)?;
                }
            }
            ec2.delete_route_table(&t.id).await.map_err(err)?;
        }
        for g in ec2
            .describe_internet_gateways(&filters)
            .await
            .map_err(err)?
        {
            for attached in &g.attached_vpcs {
                ec2.detach_internet_gateway(&g.id, attached)
                    .await
                    .map_err(err)?;
            }
            ec2.delete_internet_gateway(&g.id).await.map_err(err)?;
        }
        for s in ec2
            .describe_subnets(&[], &in_vpc(filters.clone()))
            .await
            .map_err(err)?
        {
            ec2.delete_subnet(&s.id).await.map_err(err)?;
        }
        ec2.delete_vpc(&vpc.id).await.map_err(err)?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::subnet_cidr;

    #[test]
    fn the_subnet_is_the_first_24_of_the_network() {
        for (network, subnet) in [
            ("10.0.0.0/16", "10.0.0.0/24"),
            ("10.42.0.0/20", "10.42.0.0/24"),
            ("10.42.7.0/24", "10.42.7.0/24"),
            ("10.42.7.0/26", "10.42.7.0/26"),
        ] {
            assert_eq!(subnet_cidr(network), subnet, "{network}");
        }
    }
}
