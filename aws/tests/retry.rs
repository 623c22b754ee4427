//! Retries, and the answers moto cannot give: throttling, capacity, AWS's own 5xx trouble.
//! For those only, a scripted loopback HTTP server stands in for EC2: it answers each request
//! with the next canned answer (EC2's error XML, as AWS documents it) and records what it got.
//! Everything moto can show (errors of credentials, unknown ids, conflicts) is tested against
//! moto (tests/moto.rs, tests/auth.rs).
#![allow(clippy::unwrap_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use envc_aws::{AwsError, Credentials, Ec2Client, ErrorKind, RetryPolicy, RunInstance};
use support::runtime;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// One request as the server read it: the head (request line and headers) and the body.
#[derive(Debug, Clone)]
struct Got {
    head: String,
    body: String,
}

/// An EC2 error answer.
fn error(status: u16, code: &str) -> (u16, String) {
    (
        status,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code><Message>canned {code}</Message></Error></Errors><RequestID>req-{code}</RequestID></Response>"
        ),
    )
}

fn vpcs() -> (u16, String) {
    (
        200,
        "<DescribeVpcsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>r</requestId><vpcSet><item><vpcId>vpc-1</vpcId><cidrBlock>10.0.0.0/16</cidrBlock><tagSet/></item></vpcSet></DescribeVpcsResponse>".into(),
    )
}

fn launched() -> (u16, String) {
    (
        200,
        "<RunInstancesResponse><instancesSet><item><instanceId>i-1</instanceId><imageId>ami-1</imageId><instanceState><code>0</code><name>pending</name></instanceState><instanceType>t3.micro</instanceType></item></instancesSet></RunInstancesResponse>".into(),
    )
}

/// Serves `script` in order (a 599 when it runs out) on a fresh loopback port.
async fn serve(script: Vec<(u16, String)>) -> (url::Url, Arc<Mutex<Vec<Got>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = url::Url::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let record = got.clone();
    tokio::spawn(async move {
        let mut script = script.into_iter();
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let n = conn.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the client closed before a whole request");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            while buf.len() < head_end + length {
                let n = conn.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[head_end..]).into_owned();
            record.lock().unwrap().push(Got { head, body });
            let (status, text) = script
                .next()
                .unwrap_or_else(|| error(599, "ScriptExhausted"));
            let answer = format!(
                "HTTP/1.1 {status} Canned\r\ncontent-type: text/xml\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                text.len()
            );
            conn.write_all(answer.as_bytes()).await.unwrap();
            let _ = conn.shutdown().await;
        }
    });
    (url, got)
}

fn client(endpoint: url::Url, max_attempts: u32, session_token: Option<&str>) -> Ec2Client {
    let credentials = Credentials {
        access_key_id: "AKTEST".into(),
        secret_access_key: "secret".into(),
        session_token: session_token.map(str::to_string),
        source: "test".into(),
    };
    let retry = RetryPolicy {
        max_attempts,
        base: Duration::from_millis(1),
        cap: Duration::from_millis(5),
    };
    Ec2Client::new("eu-west-3", endpoint, credentials, retry).unwrap()
}

/// Runs DescribeVpcs against `script` with `max_attempts`; checks the outcome (`ok N vpcs`
/// or the error's kind, code and attempts) and how many requests the server got.
fn check(script: Vec<(u16, String)>, max_attempts: u32, expected: &str, requests: usize) {
    runtime().block_on(async {
        let (url, got) = serve(script).await;
        let ec2 = client(url, max_attempts, None);
        let outcome = match ec2.describe_vpcs(&[]).await {
            Ok(v) => format!("ok {} vpcs", v.len()),
            Err(e) => describe(&e),
        };
        assert_eq!(outcome, expected);
        assert_eq!(
            got.lock().unwrap().len(),
            requests,
            "requests the server got"
        );
        assert_eq!(ec2.calls(), requests as u64, "calls() counts each attempt");
    });
}

fn describe(e: &AwsError) -> String {
    let attempts = match e {
        AwsError::Api { attempts, .. } | AwsError::Http { attempts, .. } => *attempts,
        _ => 0,
    };
    format!(
        "{:?} {} after {attempts}",
        e.kind(),
        e.code().unwrap_or("-")
    )
}

#[test]
fn what_is_retried() {
    // Throttled twice, then an answer.
    check(
        vec![
            error(503, "RequestLimitExceeded"),
            error(503, "RequestLimitExceeded"),
            vpcs(),
        ],
        5,
        "ok 1 vpcs",
        3,
    );
    // AWS's own trouble, with its code or only a 5xx status and a page that is not XML.
    check(vec![error(500, "InternalError"), vpcs()], 5, "ok 1 vpcs", 2);
    check(
        vec![
            error(503, "Unavailable"),
            (502, "<html>bad gateway</html>".into()),
            vpcs(),
        ],
        5,
        "ok 1 vpcs",
        3,
    );
    // A client error is not retried.
    check(
        vec![error(400, "InvalidParameterValue"), vpcs()],
        5,
        "Other InvalidParameterValue after 1",
        1,
    );
    check(
        vec![error(400, "InsufficientInstanceCapacity")],
        5,
        "Capacity InsufficientInstanceCapacity after 1",
        1,
    );
    // Retries run out: the last answer, with the attempts it took.
    check(
        vec![error(503, "RequestLimitExceeded"); 9],
        3,
        "Throttled RequestLimitExceeded after 3",
        3,
    );
    check(
        vec![error(400, "Throttling"); 9],
        4,
        "Throttled Throttling after 4",
        4,
    );
    check(
        vec![(502, "<html>bad gateway</html>".into()); 9],
        2,
        "Other HTTP 502 after 2",
        2,
    );
    // max_attempts 0 still makes the one attempt.
    check(
        vec![error(503, "RequestLimitExceeded"); 9],
        0,
        "Throttled RequestLimitExceeded after 1",
        1,
    );
    // A success that is not EC2's XML.
    check(vec![(200, "not xml".into())], 5, "Other - after 0", 1);
}

#[test]
fn an_exhausted_retry_says_so() {
    runtime().block_on(async {
        let (url, _) = serve(vec![error(503, "RequestLimitExceeded"); 9]).await;
        let e = client(url, 3, None).describe_vpcs(&[]).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "EC2 DescribeVpcs failed with RequestLimitExceeded: canned RequestLimitExceeded (HTTP 503, request req-RequestLimitExceeded, after 3 attempts)"
        );
    });
}

#[test]
fn no_server_is_unreachable() {
    runtime().block_on(async {
        // A port that was just free: the connection is refused.
        let port = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = url::Url::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let ec2 = client(url, 3, None);
        let e = ec2.describe_vpcs(&[]).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unreachable, "{e}");
        assert!(matches!(e, AwsError::Http { attempts: 3, .. }), "{e:?}");
        assert_eq!(ec2.calls(), 3);
        let shown = e.to_string();
        assert!(
            shown.starts_with(&format!(
                "EC2 DescribeVpcs got no answer from http://127.0.0.1:{port}/ after 3 attempts: "
            )),
            "{shown}"
        );
    });
}

#[test]
fn the_request_on_the_wire() {
    runtime().block_on(async {
        let (url, got) = serve(vec![error(500, "InternalError"), launched()]).await;
        let ec2 = client(url.clone(), 5, Some("the-session-token"));
        let i = ec2
            .run_instance(&RunInstance {
                image_id: "ami-1".into(),
                instance_type: "t3.micro".into(),
                user_data: Some("#!/bin/sh\necho hi\n".into()),
                ..RunInstance::default()
            })
            .await
            .unwrap();
        assert_eq!((i.id.as_str(), i.state.as_str()), ("i-1", "pending"));
        let got = got.lock().unwrap().clone();
        assert_eq!(got.len(), 2);
        let head = got[0].head.to_ascii_lowercase();
        assert!(head.starts_with("post / http/1.1\r\n"), "{head}");
        assert!(head.contains("\r\ncontent-type: application/x-www-form-urlencoded; charset=utf-8\r\n"), "{head}");
        assert!(head.contains("\r\nx-amz-security-token: the-session-token\r\n"), "{head}");
        assert!(head.contains(&format!("\r\nhost: {}\r\n", url.authority())), "{head}");
        let auth = head.lines().find_map(|l| l.strip_prefix("authorization: ")).unwrap();
        let scope = auth.strip_prefix("aws4-hmac-sha256 credential=aktest/").unwrap();
        assert!(
            scope[8..].starts_with("/eu-west-3/ec2/aws4_request, signedheaders=host;x-amz-date;x-amz-security-token, signature="),
            "{auth}"
        );
        let body = &got[0].body;
        assert!(body.starts_with("Action=RunInstances&Version=2016-11-15&ImageId=ami-1&InstanceType=t3.micro&MinCount=1&MaxCount=1&ClientToken=envc-"), "{body}");
        // base64 of the user data, form-encoded.
        assert!(body.contains("&UserData=IyEvYmluL3NoCmVjaG8gaGkK"), "{body}");
        // The retry is the same launch: same client token, same body.
        assert_eq!(got[1].body, got[0].body);
    });
}

/// A DescribeInstances page of instances (id, state), with a next token or none.
fn instances_page(instances: &[(&str, &str)], next: Option<&str>) -> (u16, String) {
    let items: String = instances
        .iter()
        .map(|(id, state)| {
            format!(
                "<item><instanceId>{id}</instanceId><imageId>ami-1</imageId><instanceState><code>0</code><name>{state}</name></instanceState><instanceType>t3.micro</instanceType></item>"
            )
        })
        .collect();
    let next = next
        .map(|t| format!("<nextToken>{t}</nextToken>"))
        .unwrap_or_default();
    (
        200,
        format!(
            "<DescribeInstancesResponse><reservationSet><item><reservationId>r-1</reservationId><instancesSet>{items}</instancesSet></item></reservationSet>{next}</DescribeInstancesResponse>"
        ),
    )
}

#[test]
fn pages_are_followed() {
    runtime().block_on(async {
        let (url, got) = serve(vec![
            instances_page(&[("i-1", "running"), ("i-2", "stopped")], Some("page+2")),
            instances_page(&[("i-3", "pending")], None),
        ])
        .await;
        let all = client(url, 1, None)
            .describe_instances(&[], &[])
            .await
            .unwrap();
        let ids: Vec<(&str, &str)> = all
            .iter()
            .map(|i| (i.id.as_str(), i.state.as_str()))
            .collect();
        assert_eq!(
            ids,
            [("i-1", "running"), ("i-2", "stopped"), ("i-3", "pending")]
        );
        let got = got.lock().unwrap();
        assert!(!got[0].body.contains("NextToken"), "{}", got[0].body);
        assert!(
            got[1].body.ends_with("&NextToken=page%2B2"),
            "{}",
            got[1].body
        );
    });
}

#[test]
fn waiting_for_a_state() {
    use envc_aws::InstanceState::{Running, Stopped};
    let every = Duration::from_millis(5);
    runtime().block_on(async {
        // Not there yet (EC2's eventual consistency after RunInstances), then pending, then
        // running.
        let (url, got) = serve(vec![
            error(400, "InvalidInstanceID.NotFound"),
            instances_page(&[("i-1", "pending")], None),
            instances_page(&[("i-1", "running")], None),
        ])
        .await;
        let i = client(url, 1, None)
            .wait_for_state("i-1", &[Running], every, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(i.state, Running);
        assert_eq!(got.lock().unwrap().len(), 3);

        // Never there: the timeout, with the last state seen.
        let (url, _) = serve(vec![instances_page(&[("i-1", "stopping")], None); 1000]).await;
        let e = client(url, 1, None)
            .wait_for_state("i-1", &[Stopped], every, Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &e,
                AwsError::Wait {
                    last: Some(envc_aws::InstanceState::Stopping),
                    ..
                }
            ),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.starts_with("instance i-1 was not stopped after ")
                && shown.ends_with(" s (it is stopping)"),
            "{shown}"
        );

        // Another error ends the wait at once.
        let (url, got) = serve(vec![error(403, "UnauthorizedOperation")]).await;
        let e = client(url, 1, None)
            .wait_for_state("i-1", &[Running], every, Duration::from_secs(30))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthorized);
        assert_eq!(got.lock().unwrap().len(), 1);
    });
}
