//! A provider that cannot start says why: the executable, what went wrong, and the last
//! lines it wrote on stderr. Each case is a small script standing in for a broken provider.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use envc_tfplugin::{PluginError, Provider, StartOptions};

/// Starts `script` as a provider and returns the error's text, the script's path as `EXE`.
async fn check(script: &str, mode: u32, expected: &str) {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("terraform-provider-broken_v1.0.0");
    std::fs::write(&exe, script).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(mode)).unwrap();
    let options = StartOptions {
        handshake_timeout: Duration::from_secs(2),
        ..StartOptions::default()
    };
    let err = Provider::start(&exe, options).await.err().unwrap();
    assert!(matches!(
        err,
        PluginError::Start { .. } | PluginError::Handshake { .. } | PluginError::Connect { .. }
    ));
    assert_eq!(
        err.to_string().replace(exe.to_str().unwrap(), "EXE"),
        expected
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn broken_providers_say_why() {
    check(
        "#!/bin/sh\necho 'This binary is a plugin. These are not meant to be executed directly.'\n",
        0o755,
        "the provider EXE did not start as a plugin: it printed `This binary is a plugin. These are not meant to be executed directly.`, not a handshake (CORE|APP|NETWORK|ADDRESS|PROTOCOL)",
    )
    .await;
    check(
        "#!/bin/sh\necho 'panic: no credentials' >&2\nexit 3\n",
        0o755,
        "the provider EXE did not start as a plugin: it exited (exit status: 3) before its handshake\nthe provider's last words on stderr:\n  panic: no credentials",
    )
    .await;
    check(
        "#!/bin/sh\necho starting >&2\nexec sleep 30\n",
        0o755,
        "the provider EXE did not start as a plugin: it printed no handshake within 2 s\nthe provider's last words on stderr:\n  starting",
    )
    .await;
    check(
        "#!/bin/sh\necho '1|5|unix|/tmp/p|grpc|'\n",
        0o755,
        "the provider EXE did not start as a plugin: it speaks plugin protocol 5, and envc speaks 6; a provider built on the legacy SDKv2 speaks 5, which envc does not speak yet",
    )
    .await;
    check(
        "#!/bin/sh\necho '1|6|unix|/nonexistent/socket|grpc|'\nexec sleep 30\n",
        0o755,
        "cannot reach the provider EXE: transport error: No such file or directory (os error 2)",
    )
    .await;
    check(
        "#!/bin/sh\n",
        0o644,
        "cannot run the provider EXE: Permission denied (os error 13) (check that the file exists and is executable for this platform)",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_environment_carries_the_cookie_the_versions_and_envcs_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("terraform-provider-env_v1.0.0");
    std::fs::write(
        &exe,
        "#!/bin/sh\necho \"cookie=$TF_PLUGIN_MAGIC_COOKIE versions=$PLUGIN_PROTOCOL_VERSIONS extra=$EXTRA\" >&2\nprintf '%s\\n' \"$PLUGIN_CLIENT_CERT\" | head -1 >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = lines.clone();
    let options = StartOptions {
        env: vec![("EXTRA".into(), "yes".into())],
        log: Some(std::sync::Arc::new(move |line: &str| {
            sink.lock().unwrap().push(line.to_string())
        })),
        ..StartOptions::default()
    };
    Provider::start(&exe, options).await.err().unwrap();
    assert_eq!(
        *lines.lock().unwrap(),
        [
            "cookie=d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2 versions=6 extra=yes",
            "-----BEGIN CERTIFICATE-----"
        ]
    );
}
