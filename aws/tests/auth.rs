//! Credentials AWS refuses, and signatures it checks, against moto with its IAM enforced:
//! started with `INITIAL_NO_AUTH_ACTION_COUNT=N`, moto lets the first N calls through, then
//! verifies each call's SigV4 signature against the secret of the access key it names (by
//! recomputing it with botocore, moto/iam/access_control.py) and checks the key's user's
//! policies. The users and keys are set up through IAM's own Query API with this client's
//! signer (service `iam`), in the calls that pass unchecked.
#![allow(clippy::unwrap_used)]

mod support;

use envc_aws::{Ec2Client, ErrorKind, Filter, Tags};
use support::{between, runtime, Moto};

const IAM_VERSION: &str = "2010-05-08";
/// The calls `setup` makes unchecked.
const SETUP_CALLS: u32 = 5;

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn allow(action: &str) -> String {
    format!(
        r#"{{"Version":"2012-10-17","Statement":[{{"Effect":"Allow","Action":"{action}","Resource":"*"}}]}}"#
    )
}

async fn iam(client: &Ec2Client, action: &str, pairs: &[(&str, &str)]) -> String {
    client
        .query("iam", IAM_VERSION, action, &params(pairs))
        .await
        .unwrap()
}

/// (access key id, secret) of a new user.
async fn access_key(client: &Ec2Client, user: &str) -> (String, String) {
    let answer = iam(client, "CreateAccessKey", &[("UserName", user)]).await;
    (
        between(&answer, "<AccessKeyId>", "</AccessKeyId>").to_string(),
        between(&answer, "<SecretAccessKey>", "</SecretAccessKey>").to_string(),
    )
}

#[test]
fn refused_credentials_and_checked_signatures() {
    let moto = Moto::start(Some(SETUP_CALLS));
    let anyone = moto.client("AKIDSETUP", "setup");
    runtime().block_on(async {
        // Unchecked: an admin who may do anything, and `dev`, who may do nothing yet.
        iam(&anyone, "CreateUser", &[("UserName", "admin")]).await;
        iam(
            &anyone,
            "PutUserPolicy",
            &[
                ("UserName", "admin"),
                ("PolicyName", "all"),
                ("PolicyDocument", &allow("*")),
            ],
        )
        .await;
        let (admin_id, admin_secret) = access_key(&anyone, "admin").await;
        iam(&anyone, "CreateUser", &[("UserName", "dev")]).await;
        let (dev_id, dev_secret) = access_key(&anyone, "dev").await;
        assert_eq!(anyone.calls(), u64::from(SETUP_CALLS));

        // From here on every call is checked. (a) A real key without a policy: AWS answers
        // UnauthorizedOperation; moto answers AccessDenied; both are Unauthorized.
        let dev = moto.client(&dev_id, &dev_secret);
        let e = dev.describe_vpcs(&[]).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::Unauthorized, Some("AccessDenied")),
            "{e}"
        );
        // Not retried.
        assert_eq!(dev.calls(), 1);

        // (b) A key AWS does not know.
        let e = moto
            .client("AKIAMADEUPMADEUPMADE", "nope")
            .describe_vpcs(&[])
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::Unauthorized, Some("AuthFailure")),
            "{e}"
        );
        assert!(
            e.to_string()
                .starts_with("EC2 DescribeVpcs failed with AuthFailure: "),
            "{e}"
        );

        // A known key with the wrong secret: the signature does not match (EC2 says
        // AuthFailure for that too).
        let e = moto
            .client(&admin_id, "not-the-secret")
            .describe_vpcs(&[])
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::Unauthorized, Some("AuthFailure")),
            "{e}"
        );
        let e = moto
            .client(&admin_id, "not-the-secret")
            .query("iam", IAM_VERSION, "ListUsers", &[])
            .await
            .unwrap_err();
        assert_eq!(
            (e.kind(), e.code()),
            (ErrorKind::Unauthorized, Some("SignatureDoesNotMatch")),
            "{e}"
        );

        // (c) The admin's signed IAM call lets `dev` use EC2, and dev's signed calls pass:
        // moto recomputed each signature from the secret, so ours are right.
        let admin = moto.client(&admin_id, &admin_secret);
        iam(
            &admin,
            "PutUserPolicy",
            &[
                ("UserName", "dev"),
                ("PolicyName", "ec2"),
                ("PolicyDocument", &allow("ec2:*")),
            ],
        )
        .await;
        let tags: Tags = [("envc:env".to_string(), "auth".to_string())]
            .into_iter()
            .collect();
        let vpc = dev.create_vpc("10.9.0.0/16", &tags).await.unwrap();
        let found = dev
            .describe_vpcs(&[Filter::tag("envc:env", "auth")])
            .await
            .unwrap();
        assert_eq!(
            found.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
            [vpc.as_str()]
        );
        // A value with characters the form encoding escapes is signed over the same bytes.
        let sg = dev
            .create_security_group("envc web/ssh", "ssh & more: ~ok (100%)", &vpc, &tags)
            .await
            .unwrap();
        dev.delete_security_group(&sg).await.unwrap();
        dev.delete_vpc(&vpc).await.unwrap();
        // Temporary credentials (a role's session): the token is sent and signed
        // (`x-amz-security-token`), and moto checks it belongs to the key.
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::123456789012:user/admin"},"Action":"sts:AssumeRole"}]}"#;
        let role = iam(&admin, "CreateRole", &[("RoleName", "envc-ci"), ("AssumeRolePolicyDocument", trust)]).await;
        let role_arn = between(&role, "<Arn>", "</Arn>").to_string();
        iam(&admin, "PutRolePolicy", &[("RoleName", "envc-ci"), ("PolicyName", "ec2"), ("PolicyDocument", &allow("ec2:*"))]).await;
        let session = admin
            .query("sts", "2011-06-15", "AssumeRole", &params(&[("RoleArn", &role_arn), ("RoleSessionName", "ci")]))
            .await
            .unwrap();
        let (key, secret, token) = (
            between(&session, "<AccessKeyId>", "</AccessKeyId>"),
            between(&session, "<SecretAccessKey>", "</SecretAccessKey>"),
            between(&session, "<SessionToken>", "</SessionToken>"),
        );
        let ci = moto.client_with_token(key, secret, Some(token));
        assert!(ci.describe_vpcs(&[]).await.is_ok());
        let e = moto.client_with_token(key, secret, Some("not-the-token")).describe_vpcs(&[]).await.unwrap_err();
        assert_eq!((e.kind(), e.code()), (ErrorKind::Unauthorized, Some("AuthFailure")), "{e}");

        // But dev still may not touch IAM.
        let e = dev
            .query("iam", IAM_VERSION, "ListUsers", &[])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthorized, "{e}");
    });
}
