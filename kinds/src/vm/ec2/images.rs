//! The images of EC2: what `envc lock` pins (`envc_lockfiles::CloudImages` over the EC2
//! client), and the same choice for a machine built without a lockfile. Credentials and endpoints come from the process's environment as the
//! AWS SDKs take them (AWS_PROFILE, AWS_ACCESS_KEY_ID…, AWS_ENDPOINT_URL), never from an env
//! file.

use envc_aws::{AwsEnv, AwsError, Ec2Client, ErrorKind};
use envc_lockfiles::cloud::{newest_of, CloudImageCandidate};
use envc_lockfiles::{CloudImageError, CloudImageNeed, CloudImagePin, CloudImages};

/// The cloud images client for this process.
pub fn clouds() -> Box<dyn CloudImages> {
    Box::new(Aws {
        env: AwsEnv::from_process(),
    })
}

/// AWS, as this process's environment reaches it.
struct Aws {
    env: AwsEnv,
}

const DESCRIBE: &str = "DescribeImages";

impl Aws {
    /// Runs `call` with a client for `region`, on a runtime of its own: `envc lock` is not
    /// async (the archive resolution runs its own runtime the same way).
    fn with_client<T>(
        &self,
        region: &str,
        call: impl AsyncFnOnce(&Ec2Client) -> Result<T, AwsError>,
    ) -> Result<T, CloudImageError> {
        let client = Ec2Client::from_env(&self.env, region).map_err(|e| error(e, region))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| CloudImageError::Other {
                message: e.to_string(),
            })?;
        rt.block_on(call(&client)).map_err(|e| error(e, region))
    }
}

/// EC2's images as the choice of the newest reads them.
pub fn candidates(images: Vec<envc_aws::Image>) -> Vec<CloudImageCandidate> {
    images
        .into_iter()
        .map(|i| CloudImageCandidate {
            id: i.id,
            name: i.name,
            owner: i.owner_id,
            architecture: i.architecture,
            created: i.creation_date,
        })
        .collect()
}

/// What `envc lock` says of an EC2 error: missing credentials and refusals each with their
/// fix, anything else with the region it was asked in.
fn error(e: AwsError, region: &str) -> CloudImageError {
    match e.kind() {
        ErrorKind::Credentials => CloudImageError::NoCredentials {
            provider: "aws".into(),
            tried: e.to_string(),
        },
        ErrorKind::Unauthorized => CloudImageError::Unauthorized {
            action: DESCRIBE.into(),
            message: e.to_string(),
        },
        _ => CloudImageError::Other {
            message: format!("EC2 {DESCRIBE} in {region}: {e}"),
        },
    }
}

impl CloudImages for Aws {
    fn newest(&self, need: &CloudImageNeed) -> Result<CloudImagePin, CloudImageError> {
        let owners = [need.owner.clone()];
        let images = self.with_client(&need.region, async |c| {
            c.describe_images(&owners, &need.pattern).await
        })?;
        newest_of(need, &candidates(images))
    }

    fn check(&self, pin: &CloudImagePin) -> Result<(), CloudImageError> {
        let found = self.with_client(&pin.region, async |c| c.describe_image(&pin.id).await)?;
        let Some(image) = found else {
            return Err(CloudImageError::NotFound {
                id: pin.id.clone(),
                region: pin.region.clone(),
            });
        };
        for (field, pinned, found) in [
            ("owner", &pin.owner, &image.owner_id),
            ("name", &pin.image_name, &image.name),
            ("architecture", &pin.architecture, &image.architecture),
        ] {
            if pinned != found {
                return Err(CloudImageError::Differs {
                    id: pin.id.clone(),
                    field,
                    pinned: pinned.clone(),
                    found: found.clone(),
                });
            }
        }
        Ok(())
    }
}
