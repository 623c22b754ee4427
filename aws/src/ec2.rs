//! The EC2 Query API: each call a form-encoded POST (`Action=…&Version=2016-11-15&…`), signed
//! with SigV4, answered in XML. Only the calls envc's EC2 provider makes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::credentials::{load_credentials, AwsEnv, Credentials};
use crate::error::{AwsError, ErrorKind};
use crate::retry::retryable;
pub use crate::retry::RetryPolicy;
use crate::sigv4::{self, AmzDate};
pub use crate::state::InstanceState;
use crate::xml::Element;

/// The EC2 API version every call names (the current one; AWS has not versioned EC2 since).
pub const EC2_VERSION: &str = "2016-11-15";
/// Each attempt's limit, from connect to the last byte of the answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// `wait_for_state`'s interval when given none.
const DEFAULT_POLL: Duration = Duration::from_secs(2);

/// Tags, applied with `TagSpecification.N` in the creating call: a resource is never without
/// its tags, not even for a moment (a crash between create and tag would leak it untracked).
pub type Tags = BTreeMap<String, String>;

/// A Describe* filter: `Filter.N.Name`, `Filter.N.Value.M`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

impl Filter {
    pub fn new<V: Into<String>>(
        name: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Filter {
        Filter {
            name: name.into(),
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// Resources whose tag `key` is `value`.
    pub fn tag(key: impl Into<String>, value: impl Into<String>) -> Filter {
        Filter::new(format!("tag:{}", key.into()), [value.into()])
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub owner_id: String,
    pub creation_date: String,
    pub architecture: String,
    pub root_device_name: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RunInstance {
    pub image_id: String,
    pub instance_type: String,
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    pub key_name: Option<String>,
    /// Plain text; the client base64s it.
    pub user_data: Option<String>,
    /// Makes the launch idempotent. When `None`, the client makes one for this call, so that
    /// its own retries never launch a second instance.
    pub client_token: Option<String>,
    /// Applied to the instance and to its volumes.
    pub tags: Tags,
    /// The root volume: device name and size in GiB (gp3, deleted with the instance).
    pub root_volume: Option<(String, u64)>,
    /// A public IPv4 address, through `NetworkInterface.1` when a subnet is given (without a
    /// subnet, the default subnet's own setting decides).
    pub associate_public_ip: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instance {
    pub id: String,
    pub state: InstanceState,
    pub instance_type: String,
    pub image_id: String,
    pub subnet_id: Option<String>,
    pub vpc_id: Option<String>,
    pub private_ip: Option<String>,
    pub public_ip: Option<String>,
    pub key_name: Option<String>,
    pub security_group_ids: Vec<String>,
    pub tags: Tags,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vpc {
    pub id: String,
    pub cidr: String,
    pub tags: Tags,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subnet {
    pub id: String,
    pub vpc_id: String,
    pub cidr: String,
    pub availability_zone: String,
    pub tags: Tags,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InternetGateway {
    pub id: String,
    pub attached_vpcs: Vec<String>,
    pub tags: Tags,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteTable {
    pub id: String,
    pub vpc_id: String,
    /// (association id, subnet, main)
    pub associations: Vec<(String, Option<String>, bool)>,
    pub tags: Tags,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecurityGroup {
    pub id: String,
    pub name: String,
    pub vpc_id: Option<String>,
    pub tags: Tags,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPair {
    pub name: String,
    pub id: Option<String>,
    pub fingerprint: Option<String>,
    pub tags: Tags,
}

/// An EC2 client for one region and endpoint. Cheap to clone (the clones share the
/// connection pool and the call counter).
#[derive(Clone)]
pub struct Ec2Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    endpoint: url::Url,
    /// The `Host` header as reqwest sends it (and as it is signed).
    host: String,
    region: String,
    credentials: Credentials,
    retry: RetryPolicy,
    calls: AtomicU64,
}

impl std::fmt::Debug for Ec2Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ec2Client")
            .field("region", &self.inner.region)
            .field("endpoint", &self.inner.endpoint.as_str())
            .field("credentials", &self.inner.credentials.source)
            .finish()
    }
}

/// Everything but RFC 3986's unreserved characters is percent-encoded.
const FORM: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A call's parameters, in the order they were added.
#[derive(Default)]
struct Params(Vec<(String, String)>);

impl Params {
    fn new() -> Params {
        Params::default()
    }

    fn set(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Params {
        self.0.push((key.into(), value.into()));
        self
    }

    /// `PREFIX.1`, `PREFIX.2`, …
    fn list(&mut self, prefix: &str, values: &[String]) -> &mut Params {
        for (i, v) in values.iter().enumerate() {
            self.set(format!("{prefix}.{}", i + 1), v.clone());
        }
        self
    }

    fn filters(&mut self, filters: &[Filter]) -> &mut Params {
        for (i, f) in filters.iter().enumerate() {
            let n = i + 1;
            self.set(format!("Filter.{n}.Name"), f.name.clone());
            self.list(&format!("Filter.{n}.Value"), &f.values);
        }
        self
    }

    /// `TagSpecification.N` for each resource type, when there are tags (an empty
    /// specification is an error to EC2).
    fn tag_specs(&mut self, resource_types: &[&str], tags: &Tags) -> &mut Params {
        if tags.is_empty() {
            return self;
        }
        for (i, rt) in resource_types.iter().enumerate() {
            let n = i + 1;
            self.set(format!("TagSpecification.{n}.ResourceType"), *rt);
            for (j, (k, v)) in tags.iter().enumerate() {
                self.set(format!("TagSpecification.{n}.Tag.{}.Key", j + 1), k.clone());
                self.set(
                    format!("TagSpecification.{n}.Tag.{}.Value", j + 1),
                    v.clone(),
                );
            }
        }
        self
    }
}

fn form_body(action: &str, version: &str, params: &[(String, String)]) -> String {
    let mut body = format!("Action={}&Version={}", form(action), form(version));
    for (k, v) in params {
        body.push('&');
        body.push_str(&form(k));
        body.push('=');
        body.push_str(&form(v));
    }
    body
}

/// A form value as botocore encodes it (Python's `urlencode`): unreserved characters as they
/// are, a space as `+`, everything else percent-encoded. AWS hashes the bytes it received, so
/// any encoding would sign; moto re-encodes the form it parsed before it checks a signature,
/// so only this one passes there too.
fn form(s: &str) -> String {
    // `%` itself is encoded, so `%20` in the output can only be a space.
    utf8_percent_encode(s, FORM).to_string().replace("%20", "+")
}

/// An error answer's code, message and request id, from EC2's
/// `<Response><Errors><Error><Code>…` or the `<ErrorResponse><Error>…` of IAM and others.
fn error_answer(text: &str) -> Option<(String, String, Option<String>)> {
    let doc = Element::parse(text).ok()?;
    let error = doc.find("Error")?;
    let code = error.text_of("Code")?;
    let message = error.text_of("Message").unwrap_or_default();
    let request_id = doc
        .find("RequestID")
        .or_else(|| doc.find("RequestId"))
        .map(|e| e.text.trim().to_string())
        .filter(|t| !t.is_empty());
    Some((code, message, request_id))
}

/// An error and its causes, one line (reqwest's own Display leaves the cause out).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    s
}

fn random_token() -> String {
    format!("envc-{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

impl Ec2Client {
    pub fn new(
        region: &str,
        endpoint: url::Url,
        credentials: Credentials,
        retry: RetryPolicy,
    ) -> Result<Ec2Client, AwsError> {
        let Some(host) = endpoint.host_str() else {
            return Err(AwsError::Config {
                path: endpoint.as_str().into(),
                line: 0,
                what: "the endpoint has no host".to_string(),
            });
        };
        let host = match endpoint.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| AwsError::Http {
                action: "(client setup)".to_string(),
                endpoint: endpoint.to_string(),
                what: error_chain(&e),
                attempts: 0,
            })?;
        Ok(Ec2Client {
            inner: Arc::new(Inner {
                http,
                endpoint,
                host,
                region: region.to_string(),
                credentials,
                retry,
                calls: AtomicU64::new(0),
            }),
        })
    }

    /// `load_credentials` + `ec2_endpoint` + the default retry policy.
    pub fn from_env(env: &AwsEnv, region: &str) -> Result<Ec2Client, AwsError> {
        let credentials = load_credentials(env)?;
        let endpoint = env.ec2_endpoint(region)?;
        Ec2Client::new(region, endpoint, credentials, RetryPolicy::default())
    }

    pub fn region(&self) -> &str {
        &self.inner.region
    }

    pub fn endpoint(&self) -> &url::Url {
        &self.inner.endpoint
    }

    /// Where the credentials came from, for messages.
    pub fn credentials_source(&self) -> &str {
        &self.inner.credentials.source
    }

    /// API calls sent so far (each attempt counts), for benchmarks.
    pub fn calls(&self) -> u64 {
        self.inner.calls.load(Ordering::Relaxed)
    }

    /// Any Query-API action of any service at this client's endpoint, signed for `service`
    /// in this client's region, with the same retries; the answer's XML as text. For actions
    /// the client does not wrap (the tests set up IAM users through it).
    pub async fn query(
        &self,
        service: &str,
        version: &str,
        action: &str,
        params: &[(String, String)],
    ) -> Result<String, AwsError> {
        let inner = &self.inner;
        let body = form_body(action, version, params);
        let max = inner.retry.max_attempts.max(1);
        let mut attempt = 0;
        loop {
            attempt += 1;
            inner.calls.fetch_add(1, Ordering::Relaxed);
            let date = AmzDate::now();
            let token = inner.credentials.session_token.as_deref();
            let signed: Vec<(&str, &str)> = token
                .map(|t| ("x-amz-security-token", t))
                .into_iter()
                .collect();
            let authorization = sigv4::authorization(
                &sigv4::Request {
                    method: "POST",
                    host: &inner.host,
                    path: inner.endpoint.path(),
                    headers: &signed,
                    payload: body.as_bytes(),
                },
                &sigv4::Key {
                    access_key_id: &inner.credentials.access_key_id,
                    secret_access_key: &inner.credentials.secret_access_key,
                    region: &inner.region,
                    service,
                },
                &date,
            );
            let mut request = inner
                .http
                .post(inner.endpoint.clone())
                .header(
                    "content-type",
                    "application/x-www-form-urlencoded; charset=utf-8",
                )
                .header("x-amz-date", &date.stamp)
                .header("authorization", authorization)
                .body(body.clone());
            if let Some(t) = token {
                request = request.header("x-amz-security-token", t);
            }
            // An answer, or why there was none.
            let answer = match request.send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    match response.text().await {
                        Ok(text) => Ok((status, text)),
                        Err(e) => Err(error_chain(&e)),
                    }
                }
                Err(e) => Err(error_chain(&e)),
            };
            match answer {
                Ok((status, text)) if (200..300).contains(&status) => return Ok(text),
                Ok((status, text)) => {
                    let (code, message, request_id) = error_answer(&text).unwrap_or_else(|| {
                        let snippet: String = text.chars().take(200).collect();
                        (format!("HTTP {status}"), snippet.trim().to_string(), None)
                    });
                    if attempt < max && retryable(status, &code) {
                        tokio::time::sleep(inner.retry.backoff(attempt)).await;
                        continue;
                    }
                    return Err(AwsError::Api {
                        action: action.to_string(),
                        status,
                        code,
                        message,
                        request_id,
                        attempts: attempt,
                    });
                }
                Err(what) => {
                    if attempt < max {
                        tokio::time::sleep(inner.retry.backoff(attempt)).await;
                        continue;
                    }
                    return Err(AwsError::Http {
                        action: action.to_string(),
                        endpoint: inner.endpoint.to_string(),
                        what,
                        attempts: attempt,
                    });
                }
            }
        }
    }

    async fn call(&self, action: &str, params: &Params) -> Result<Element, AwsError> {
        let text = self.query("ec2", EC2_VERSION, action, &params.0).await?;
        Element::parse(&text).map_err(|e| AwsError::BadResponse {
            action: action.to_string(),
            what: format!("not XML ({})", e.0),
        })
    }

    /// Every page of a Describe call (`NextToken`).
    async fn call_pages(&self, action: &str, params: &Params) -> Result<Vec<Element>, AwsError> {
        let mut pages = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut p = Params(params.0.clone());
            if let Some(t) = &token {
                p.set("NextToken", t.clone());
            }
            let page = self.call(action, &p).await?;
            let next = page.text_of("nextToken");
            pages.push(page);
            match next {
                // A token that repeats would loop forever.
                Some(n) if token.as_ref() != Some(&n) => token = Some(n),
                _ => return Ok(pages),
            }
        }
    }

    // ---- images ----

    /// Available images of these owners whose name matches `name_pattern` (`*` and `?`).
    pub async fn describe_images(
        &self,
        owners: &[String],
        name_pattern: &str,
    ) -> Result<Vec<Image>, AwsError> {
        let action = "DescribeImages";
        let mut p = Params::new();
        p.list("Owner", owners).filters(&[
            Filter::new("name", [name_pattern]),
            Filter::new("state", ["available"]),
        ]);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for item in page.items("imagesSet") {
                out.push(image(action, item)?);
            }
        }
        Ok(out)
    }

    /// One image, `None` when EC2 does not know it.
    pub async fn describe_image(&self, image_id: &str) -> Result<Option<Image>, AwsError> {
        let action = "DescribeImages";
        let mut p = Params::new();
        p.set("ImageId.1", image_id);
        match self.call(action, &p).await {
            Ok(doc) => doc
                .items("imagesSet")
                .next()
                .map(|i| image(action, i))
                .transpose(),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    // ---- instances ----

    /// Launches one instance (MinCount = MaxCount = 1).
    pub async fn run_instance(&self, req: &RunInstance) -> Result<Instance, AwsError> {
        let action = "RunInstances";
        let mut p = Params::new();
        p.set("ImageId", req.image_id.clone())
            .set("InstanceType", req.instance_type.clone())
            .set("MinCount", "1")
            .set("MaxCount", "1")
            .set(
                "ClientToken",
                req.client_token.clone().unwrap_or_else(random_token),
            );
        if let Some(k) = &req.key_name {
            p.set("KeyName", k.clone());
        }
        if let Some(u) = &req.user_data {
            p.set(
                "UserData",
                base64::engine::general_purpose::STANDARD.encode(u.as_bytes()),
            );
        }
        match (&req.subnet_id, req.associate_public_ip) {
            (Some(subnet), true) => {
                p.set("NetworkInterface.1.DeviceIndex", "0")
                    .set("NetworkInterface.1.SubnetId", subnet.clone())
                    .set("NetworkInterface.1.AssociatePublicIpAddress", "true")
                    .set("NetworkInterface.1.DeleteOnTermination", "true")
                    .list(
                        "NetworkInterface.1.SecurityGroupId",
                        &req.security_group_ids,
                    );
            }
            (subnet, _) => {
                if let Some(s) = subnet {
                    p.set("SubnetId", s.clone());
                }
                p.list("SecurityGroupId", &req.security_group_ids);
            }
        }
        if let Some((device, gib)) = &req.root_volume {
            p.set("BlockDeviceMapping.1.DeviceName", device.clone())
                .set("BlockDeviceMapping.1.Ebs.VolumeSize", gib.to_string())
                .set("BlockDeviceMapping.1.Ebs.VolumeType", "gp3")
                .set("BlockDeviceMapping.1.Ebs.DeleteOnTermination", "true");
        }
        p.tag_specs(&["instance", "volume"], &req.tags);
        let doc = self.call(action, &p).await?;
        let first = doc.items("instancesSet").next();
        match first {
            Some(item) => instance(action, item),
            None => Err(bad(action, "no instance in the answer")),
        }
    }

    /// Instances by id and filters (both may be empty), every page.
    pub async fn describe_instances(
        &self,
        ids: &[String],
        filters: &[Filter],
    ) -> Result<Vec<Instance>, AwsError> {
        let action = "DescribeInstances";
        let mut p = Params::new();
        p.list("InstanceId", ids).filters(filters);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for reservation in page.items("reservationSet") {
                for item in reservation.items("instancesSet") {
                    out.push(instance(action, item)?);
                }
            }
        }
        Ok(out)
    }

    /// The instance's user data, base64-decoded; `None` when it has none.
    pub async fn instance_user_data(&self, id: &str) -> Result<Option<String>, AwsError> {
        let action = "DescribeInstanceAttribute";
        let mut p = Params::new();
        p.set("InstanceId", id).set("Attribute", "userData");
        let doc = self.call(action, &p).await?;
        let Some(encoded) = doc.child("userData").and_then(|u| u.text_of("value")) else {
            return Ok(None);
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|e| bad(action, &format!("userData is not base64: {e}")))?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| bad(action, "userData is not UTF-8 text"))
    }

    pub async fn stop_instance(&self, id: &str) -> Result<(), AwsError> {
        self.call("StopInstances", Params::new().set("InstanceId.1", id))
            .await
            .map(drop)
    }

    pub async fn start_instance(&self, id: &str) -> Result<(), AwsError> {
        self.call("StartInstances", Params::new().set("InstanceId.1", id))
            .await
            .map(drop)
    }

    /// Tags an existing resource (an instance envc adopts: made outside envc, it was
    /// created without envc's tags).
    pub async fn create_tags(&self, id: &str, tags: &Tags) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("ResourceId.1", id);
        for (i, (k, v)) in tags.iter().enumerate() {
            p.set(format!("Tag.{}.Key", i + 1), k.as_str())
                .set(format!("Tag.{}.Value", i + 1), v.as_str());
        }
        self.call("CreateTags", &p).await.map(drop)
    }

    /// Removes tags `keys` (whatever their values) from a resource.
    pub async fn delete_tags(&self, id: &str, keys: &[String]) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("ResourceId.1", id);
        for (i, k) in keys.iter().enumerate() {
            p.set(format!("Tag.{}.Key", i + 1), k.as_str());
        }
        self.call("DeleteTags", &p).await.map(drop)
    }

    pub async fn terminate_instance(&self, id: &str) -> Result<(), AwsError> {
        self.call("TerminateInstances", Params::new().set("InstanceId.1", id))
            .await
            .map(drop)
    }

    /// The instance type of a stopped instance.
    pub async fn modify_instance_type(
        &self,
        id: &str,
        instance_type: &str,
    ) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("InstanceId", id)
            .set("InstanceType.Value", instance_type);
        self.call("ModifyInstanceAttribute", &p).await.map(drop)
    }

    /// Polls DescribeInstances (`every` apart, 2 s when zero) until the instance is in one of
    /// `want`, or `timeout` passed. An instance EC2 does not show yet (its eventual
    /// consistency after RunInstances) is waited for too; one that is terminated when that
    /// is not wanted fails at once.
    pub async fn wait_for_state(
        &self,
        id: &str,
        want: &[InstanceState],
        every: Duration,
        timeout: Duration,
    ) -> Result<Instance, AwsError> {
        let every = if every.is_zero() { DEFAULT_POLL } else { every };
        let start = tokio::time::Instant::now();
        let mut last = None;
        loop {
            match self.describe_instances(&[id.to_string()], &[]).await {
                Ok(found) => {
                    if let Some(i) = found.into_iter().find(|i| i.id == id) {
                        if want.contains(&i.state) {
                            return Ok(i);
                        }
                        last = Some(i.state);
                        if i.state == InstanceState::Terminated {
                            break;
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            if start.elapsed() + every > timeout {
                break;
            }
            tokio::time::sleep(every).await;
        }
        Err(AwsError::Wait {
            instance: id.to_string(),
            want: want.to_vec(),
            last,
            waited: start.elapsed(),
        })
    }

    // ---- network ----

    pub async fn create_vpc(&self, cidr: &str, tags: &Tags) -> Result<String, AwsError> {
        let action = "CreateVpc";
        let mut p = Params::new();
        p.set("CidrBlock", cidr).tag_specs(&["vpc"], tags);
        let doc = self.call(action, &p).await?;
        nested_id(action, &doc, "vpc", "vpcId")
    }

    pub async fn describe_vpcs(&self, filters: &[Filter]) -> Result<Vec<Vpc>, AwsError> {
        let action = "DescribeVpcs";
        let mut p = Params::new();
        p.filters(filters);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for item in page.items("vpcSet") {
                out.push(Vpc {
                    id: need(action, item, "vpcId")?,
                    cidr: need(action, item, "cidrBlock")?,
                    tags: tags(item),
                });
            }
        }
        Ok(out)
    }

    pub async fn delete_vpc(&self, id: &str) -> Result<(), AwsError> {
        self.call("DeleteVpc", Params::new().set("VpcId", id))
            .await
            .map(drop)
    }

    pub async fn create_subnet(
        &self,
        vpc: &str,
        cidr: &str,
        tags: &Tags,
    ) -> Result<String, AwsError> {
        let action = "CreateSubnet";
        let mut p = Params::new();
        p.set("VpcId", vpc)
            .set("CidrBlock", cidr)
            .tag_specs(&["subnet"], tags);
        let doc = self.call(action, &p).await?;
        nested_id(action, &doc, "subnet", "subnetId")
    }

    /// Instances launched into the subnet get a public IPv4 address (ModifySubnetAttribute).
    pub async fn map_public_ip_on_launch(&self, subnet: &str) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("SubnetId", subnet)
            .set("MapPublicIpOnLaunch.Value", "true");
        self.call("ModifySubnetAttribute", &p).await.map(drop)
    }

    pub async fn describe_subnets(
        &self,
        ids: &[String],
        filters: &[Filter],
    ) -> Result<Vec<Subnet>, AwsError> {
        let action = "DescribeSubnets";
        let mut p = Params::new();
        p.list("SubnetId", ids).filters(filters);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for item in page.items("subnetSet") {
                out.push(Subnet {
                    id: need(action, item, "subnetId")?,
                    vpc_id: need(action, item, "vpcId")?,
                    cidr: need(action, item, "cidrBlock")?,
                    availability_zone: need(action, item, "availabilityZone")?,
                    tags: tags(item),
                });
            }
        }
        Ok(out)
    }

    pub async fn delete_subnet(&self, id: &str) -> Result<(), AwsError> {
        self.call("DeleteSubnet", Params::new().set("SubnetId", id))
            .await
            .map(drop)
    }

    pub async fn create_internet_gateway(&self, tags: &Tags) -> Result<String, AwsError> {
        let action = "CreateInternetGateway";
        let mut p = Params::new();
        p.tag_specs(&["internet-gateway"], tags);
        let doc = self.call(action, &p).await?;
        nested_id(action, &doc, "internetGateway", "internetGatewayId")
    }

    pub async fn attach_internet_gateway(&self, igw: &str, vpc: &str) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("InternetGatewayId", igw).set("VpcId", vpc);
        self.call("AttachInternetGateway", &p).await.map(drop)
    }

    pub async fn detach_internet_gateway(&self, igw: &str, vpc: &str) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("InternetGatewayId", igw).set("VpcId", vpc);
        self.call("DetachInternetGateway", &p).await.map(drop)
    }

    pub async fn delete_internet_gateway(&self, igw: &str) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("InternetGatewayId", igw);
        self.call("DeleteInternetGateway", &p).await.map(drop)
    }

    pub async fn describe_internet_gateways(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<InternetGateway>, AwsError> {
        let action = "DescribeInternetGateways";
        let mut p = Params::new();
        p.filters(filters);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for item in page.items("internetGatewaySet") {
                out.push(InternetGateway {
                    id: need(action, item, "internetGatewayId")?,
                    attached_vpcs: item
                        .items("attachmentSet")
                        .filter_map(|a| a.text_of("vpcId"))
                        .collect(),
                    tags: tags(item),
                });
            }
        }
        Ok(out)
    }

    pub async fn create_route_table(&self, vpc: &str, tags: &Tags) -> Result<String, AwsError> {
        let action = "CreateRouteTable";
        let mut p = Params::new();
        p.set("VpcId", vpc).tag_specs(&["route-table"], tags);
        let doc = self.call(action, &p).await?;
        nested_id(action, &doc, "routeTable", "routeTableId")
    }

    /// A route of 0.0.0.0/0 through the internet gateway.
    pub async fn create_default_route(&self, route_table: &str, igw: &str) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("RouteTableId", route_table)
            .set("DestinationCidrBlock", "0.0.0.0/0")
            .set("GatewayId", igw);
        self.call("CreateRoute", &p).await.map(drop)
    }

    /// The association's id.
    pub async fn associate_route_table(
        &self,
        route_table: &str,
        subnet: &str,
    ) -> Result<String, AwsError> {
        let action = "AssociateRouteTable";
        let mut p = Params::new();
        p.set("RouteTableId", route_table).set("SubnetId", subnet);
        let doc = self.call(action, &p).await?;
        need(action, &doc, "associationId")
    }

    pub async fn disassociate_route_table(&self, association: &str) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("AssociationId", association);
        self.call("DisassociateRouteTable", &p).await.map(drop)
    }

    pub async fn delete_route_table(&self, id: &str) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("RouteTableId", id);
        self.call("DeleteRouteTable", &p).await.map(drop)
    }

    pub async fn describe_route_tables(
        &self,
        filters: &[Filter],
    ) -> Result<Vec<RouteTable>, AwsError> {
        let action = "DescribeRouteTables";
        let mut p = Params::new();
        p.filters(filters);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for item in page.items("routeTableSet") {
                let mut associations = Vec::new();
                for a in item.items("associationSet") {
                    associations.push((
                        need(action, a, "routeTableAssociationId")?,
                        a.text_of("subnetId"),
                        a.text_of("main").as_deref() == Some("true"),
                    ));
                }
                out.push(RouteTable {
                    id: need(action, item, "routeTableId")?,
                    vpc_id: need(action, item, "vpcId")?,
                    associations,
                    tags: tags(item),
                });
            }
        }
        Ok(out)
    }

    pub async fn create_security_group(
        &self,
        name: &str,
        description: &str,
        vpc: &str,
        tags: &Tags,
    ) -> Result<String, AwsError> {
        let action = "CreateSecurityGroup";
        let mut p = Params::new();
        p.set("GroupName", name)
            .set("GroupDescription", description)
            .set("VpcId", vpc)
            .tag_specs(&["security-group"], tags);
        let doc = self.call(action, &p).await?;
        need(action, &doc, "groupId")
    }

    /// Lets TCP `port` in from `cidrs` (AuthorizeSecurityGroupIngress); a rule that is
    /// already there is fine.
    pub async fn allow_tcp_in(
        &self,
        group: &str,
        port: u16,
        cidrs: &[String],
    ) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("GroupId", group)
            .set("IpPermissions.1.IpProtocol", "tcp")
            .set("IpPermissions.1.FromPort", port.to_string())
            .set("IpPermissions.1.ToPort", port.to_string());
        for (i, cidr) in cidrs.iter().enumerate() {
            p.set(
                format!("IpPermissions.1.IpRanges.{}.CidrIp", i + 1),
                cidr.clone(),
            );
        }
        match self.call("AuthorizeSecurityGroupIngress", &p).await {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("InvalidPermission.Duplicate") => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn delete_security_group(&self, id: &str) -> Result<(), AwsError> {
        self.call("DeleteSecurityGroup", Params::new().set("GroupId", id))
            .await
            .map(drop)
    }

    pub async fn describe_security_groups(
        &self,
        ids: &[String],
        filters: &[Filter],
    ) -> Result<Vec<SecurityGroup>, AwsError> {
        let action = "DescribeSecurityGroups";
        let mut p = Params::new();
        p.list("GroupId", ids).filters(filters);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for item in page.items("securityGroupInfo") {
                out.push(SecurityGroup {
                    id: need(action, item, "groupId")?,
                    name: need(action, item, "groupName")?,
                    vpc_id: item.text_of("vpcId"),
                    tags: tags(item),
                });
            }
        }
        Ok(out)
    }

    /// Imports an OpenSSH public key (`ssh-ed25519 AAAA… comment`) under `name`.
    pub async fn import_key_pair(
        &self,
        name: &str,
        public_key: &str,
        tags: &Tags,
    ) -> Result<(), AwsError> {
        let mut p = Params::new();
        p.set("KeyName", name)
            .set(
                "PublicKeyMaterial",
                base64::engine::general_purpose::STANDARD.encode(public_key.trim().as_bytes()),
            )
            .tag_specs(&["key-pair"], tags);
        self.call("ImportKeyPair", &p).await.map(drop)
    }

    pub async fn delete_key_pair(&self, name: &str) -> Result<(), AwsError> {
        self.call("DeleteKeyPair", Params::new().set("KeyName", name))
            .await
            .map(drop)
    }

    pub async fn describe_key_pairs(&self, filters: &[Filter]) -> Result<Vec<KeyPair>, AwsError> {
        let action = "DescribeKeyPairs";
        let mut p = Params::new();
        p.filters(filters);
        let mut out = Vec::new();
        for page in self.call_pages(action, &p).await? {
            for item in page.items("keySet") {
                out.push(KeyPair {
                    name: need(action, item, "keyName")?,
                    id: item.text_of("keyPairId"),
                    fingerprint: item.text_of("keyFingerprint"),
                    tags: tags(item),
                });
            }
        }
        Ok(out)
    }
}

fn bad(action: &str, what: &str) -> AwsError {
    AwsError::BadResponse {
        action: action.to_string(),
        what: what.to_string(),
    }
}

/// A field the answer must have.
fn need(action: &str, e: &Element, name: &str) -> Result<String, AwsError> {
    e.text_of(name)
        .ok_or_else(|| bad(action, &format!("no <{name}> in <{}>", e.name)))
}

/// `<vpc><vpcId>…` of a Create* answer.
fn nested_id(action: &str, doc: &Element, object: &str, id: &str) -> Result<String, AwsError> {
    match doc.child(object) {
        Some(o) => need(action, o, id),
        None => Err(bad(action, &format!("no <{object}> in the answer"))),
    }
}

fn tags(e: &Element) -> Tags {
    e.items("tagSet")
        .filter_map(|t| Some((t.text_of("key")?, t.text_of("value").unwrap_or_default())))
        .collect()
}

fn image(action: &str, item: &Element) -> Result<Image, AwsError> {
    Ok(Image {
        id: need(action, item, "imageId")?,
        name: need(action, item, "name")?,
        owner_id: need(action, item, "imageOwnerId")?,
        creation_date: item.text_of("creationDate").unwrap_or_default(),
        architecture: need(action, item, "architecture")?,
        root_device_name: item.text_of("rootDeviceName"),
    })
}

/// The instance's groups and its network interfaces' (an instance launched with
/// `NetworkInterface.1` has its groups there; moto shows them only there).
fn security_groups(item: &Element) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let nics = item.items("networkInterfaceSet");
    for set in std::iter::once(item).chain(nics) {
        for g in set.items("groupSet").filter_map(|g| g.text_of("groupId")) {
            if !out.contains(&g) {
                out.push(g);
            }
        }
    }
    out
}

fn instance(action: &str, item: &Element) -> Result<Instance, AwsError> {
    let id = need(action, item, "instanceId")?;
    let state_name = item
        .child("instanceState")
        .and_then(|s| s.text_of("name"))
        .ok_or_else(|| {
            bad(
                action,
                &format!("instance {id} has no <instanceState><name>"),
            )
        })?;
    let state = InstanceState::from_name(&state_name).ok_or_else(|| {
        bad(
            action,
            &format!("instance {id} is in a state EC2 does not define: `{state_name}`"),
        )
    })?;
    Ok(Instance {
        state,
        instance_type: need(action, item, "instanceType")?,
        image_id: need(action, item, "imageId")?,
        subnet_id: item.text_of("subnetId"),
        vpc_id: item.text_of("vpcId"),
        private_ip: item.text_of("privateIpAddress"),
        public_ip: item.text_of("ipAddress"),
        key_name: item.text_of("keyName"),
        security_group_ids: security_groups(item),
        tags: tags(item),
        id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_encoding() {
        let mut p = Params::new();
        p.set("GroupDescription", "ssh & web/8080 ~ok")
            .filters(&[
                Filter::tag("envc:env", "a b"),
                Filter::new("state", ["x", "y"]),
            ])
            .tag_specs(
                &["vpc"],
                &Tags::from([("k".to_string(), "v=1".to_string())]),
            );
        assert_eq!(
            form_body("CreateX", EC2_VERSION, &p.0),
            "Action=CreateX&Version=2016-11-15&GroupDescription=ssh+%26+web%2F8080+~ok\
             &Filter.1.Name=tag%3Aenvc%3Aenv&Filter.1.Value.1=a+b\
             &Filter.2.Name=state&Filter.2.Value.1=x&Filter.2.Value.2=y\
             &TagSpecification.1.ResourceType=vpc&TagSpecification.1.Tag.1.Key=k&TagSpecification.1.Tag.1.Value=v%3D1"
        );
        // No tags, no TagSpecification.
        let mut p = Params::new();
        p.tag_specs(&["vpc"], &Tags::new());
        assert!(p.0.is_empty());
    }

    #[test]
    fn error_answers() {
        let ec2 = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>InvalidVpcID.NotFound</Code><Message>The vpc ID 'vpc-1' does not exist</Message></Error></Errors><RequestID>abc-1</RequestID></Response>";
        assert_eq!(
            error_answer(ec2),
            Some((
                "InvalidVpcID.NotFound".into(),
                "The vpc ID 'vpc-1' does not exist".into(),
                Some("abc-1".into())
            ))
        );
        let iam = "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidClientTokenId</Code><Message>bad</Message></Error><RequestId>r2</RequestId></ErrorResponse>";
        assert_eq!(
            error_answer(iam),
            Some((
                "InvalidClientTokenId".into(),
                "bad".into(),
                Some("r2".into())
            ))
        );
        assert_eq!(error_answer("<html>bad gateway</html>"), None);
    }
}
