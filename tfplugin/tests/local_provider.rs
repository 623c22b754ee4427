//! A provider's whole life through the client, against `local` (tests/providers/local.py),
//! written with PyPI's tfprovider: a second, independent reading of the protocol's server
//! side. Each step checks the file on disk as well as what the provider answers.
#![allow(clippy::unwrap_used)]

mod support;

use envc_tfplugin::handshake::Network;
use envc_tfplugin::{PathStep, Provider, Value};
use support::{obj, s};

const TYPE: &str = "local_file";

struct Local {
    provider: Provider,
    dir: tempfile::TempDir,
}

impl Local {
    async fn start() -> Local {
        let provider = support::start(&support::local_executable()).await;
        let dir = tempfile::tempdir().unwrap();
        let diagnostics = provider
            .configure(&obj(&[("root", s(dir.path().to_str().unwrap()))]))
            .await
            .unwrap();
        assert_eq!(diagnostics, vec![]);
        Local { provider, dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    fn config(&self, name: &str, content: &str) -> Value {
        obj(&[("filename", s(&self.path(name))), ("content", s(content))])
    }

    /// Plans from `prior` to `config` as envc will: the proposed new state first.
    async fn plan(&self, prior: &Value, config: &Value) -> envc_tfplugin::Planned {
        let schema = self.provider.schema().await.unwrap();
        let proposed = schema.resources[TYPE].block.proposed_new(prior, config);
        let planned = self
            .provider
            .plan(TYPE, prior, &proposed, config, &[])
            .await
            .unwrap();
        assert_eq!(planned.diagnostics, vec![]);
        planned
    }

    async fn apply(&self, prior: &Value, config: &Value) -> Value {
        let planned = self.plan(prior, config).await;
        let applied = self
            .provider
            .apply(
                TYPE,
                prior,
                &planned.planned_state,
                config,
                &planned.planned_private,
            )
            .await
            .unwrap();
        assert_eq!(applied.diagnostics, vec![]);
        assert!(applied.state.is_known(), "{:?}", applied.state);
        applied.state
    }
}

fn sha1_hex(text: &str) -> String {
    // The provider's id is the SHA-1 of the content; checked against coreutils' own.
    let mut child = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_handshake_is_tls_over_tcp_with_the_printed_certificate() {
    let provider = support::start(&support::local_executable()).await;
    assert_eq!(provider.handshake.protocol, 6);
    assert_eq!(provider.handshake.network, Network::Tcp);
    assert!(provider.handshake.server_cert.is_some());
    let schema = provider.schema().await.unwrap();
    let block = &schema.resources[TYPE].block;
    let flags: Vec<_> = block
        .attributes
        .iter()
        .map(|(name, a)| {
            format!(
                "{name}: {} r{} o{} c{} s{}",
                a.ty.describe(),
                a.required as u8,
                a.optional as u8,
                a.computed as u8,
                a.sensitive as u8
            )
        })
        .collect();
    assert_eq!(
        flags,
        [
            "content: string r1 o0 c0 s1",
            "content_sha256: string r0 o0 c1 s0",
            "file_permission: string r0 o1 c1 s0",
            "filename: string r1 o0 c0 s0",
            "id: string r0 o0 c1 s0",
        ]
    );
    assert!(block.is_sensitive(&[PathStep::Attribute("content".into())]));
    assert!(!block.is_sensitive(&[PathStep::Attribute("filename".into())]));
    assert!(schema.plan_destroy);
    provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_names_each_bad_attribute() {
    let local = Local::start().await;
    let config = obj(&[
        ("filename", s("relative.txt")),
        ("content", s("x")),
        ("file_permission", s("999")),
    ]);
    let diagnostics = local
        .provider
        .validate_resource_config(TYPE, &config)
        .await
        .unwrap();
    let paths: Vec<_> = diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| envc_tfplugin::diagnostic::path_text(&d.path))
        .collect();
    assert_eq!(paths, ["filename", "file_permission"], "{diagnostics:?}");
    assert_eq!(
        local
            .provider
            .validate_resource_config(TYPE, &local.config("a", "x"))
            .await
            .unwrap(),
        vec![]
    );
    // A wrong type never reaches the provider: the client refuses to encode it.
    let wrong = obj(&[("filename", Value::Bool(true))]);
    let err = local
        .provider
        .validate_resource_config(TYPE, &wrong)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "ValidateResourceConfig with the provider {}: a bool where string is expected",
            support::local_executable().display()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn create_no_op_change_replace_drift_import_and_destroy() {
    let local = Local::start().await;
    let config = local.config("motd", "hello\n");

    // Create: the computed attributes are unknown until applied.
    let planned = local.plan(&Value::Null, &config).await;
    assert_eq!(planned.planned_state.attr("id"), &Value::Unknown);
    assert_eq!(
        planned.planned_state.attr("filename"),
        &s(&local.path("motd"))
    );
    let state = local.apply(&Value::Null, &config).await;
    assert_eq!(
        std::fs::read_to_string(local.path("motd")).unwrap(),
        "hello\n"
    );
    assert_eq!(state.attr("id"), &s(&sha1_hex("hello\n")));
    assert_eq!(state.attr("file_permission"), &s("0644"));

    // Read back and plan again: nothing changes.
    let read = local.provider.read(TYPE, &state, &[]).await.unwrap();
    assert_eq!(read.state, state);
    let planned = local.plan(&state, &config).await;
    assert_eq!(planned.planned_state, state);
    assert!(planned.requires_replace.is_empty());

    // A new content is a change in place; its id is unknown until applied.
    let changed = local.config("motd", "bye\n");
    let planned = local.plan(&state, &changed).await;
    assert!(planned.requires_replace.is_empty());
    assert_eq!(planned.planned_state.attr("id"), &Value::Unknown);
    let state = local.apply(&state, &changed).await;
    assert_eq!(
        std::fs::read_to_string(local.path("motd")).unwrap(),
        "bye\n"
    );

    // A new filename requires a replacement.
    let planned = local.plan(&state, &local.config("motd2", "bye\n")).await;
    assert_eq!(
        planned.requires_replace,
        vec![vec![PathStep::Attribute("filename".into())]]
    );

    // Drift: an edit by hand is read back, a deletion reads as gone.
    std::fs::write(local.path("motd"), "edited\n").unwrap();
    let read = local.provider.read(TYPE, &state, &[]).await.unwrap();
    assert_eq!(read.state.attr("content"), &s("edited\n"));
    std::fs::remove_file(local.path("motd")).unwrap();
    assert_eq!(
        local.provider.read(TYPE, &state, &[]).await.unwrap().state,
        Value::Null
    );

    // Import takes an existing file by its path.
    std::fs::write(local.path("motd"), "bye\n").unwrap();
    let imported = local
        .provider
        .import(TYPE, &local.path("motd"))
        .await
        .unwrap();
    assert_eq!(imported.diagnostics, vec![]);
    assert_eq!(imported.resources.len(), 1);
    assert_eq!(imported.resources[0].0, TYPE);
    assert_eq!(imported.resources[0].1.state.attr("content"), &s("bye\n"));

    // Destroy: a plan to null, applied.
    let planned = local
        .provider
        .plan(TYPE, &state, &Value::Null, &Value::Null, &[])
        .await
        .unwrap();
    assert_eq!(planned.planned_state, Value::Null);
    let applied = local
        .provider
        .apply(TYPE, &state, &Value::Null, &Value::Null, &[])
        .await
        .unwrap();
    assert_eq!((applied.state, applied.diagnostics), (Value::Null, vec![]));
    assert!(!std::path::Path::new(&local.path("motd")).exists());
    local.provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_old_state_is_upgraded_from_its_json() {
    let local = Local::start().await;
    let raw = format!(
        r#"{{"filename":"{}","content":"x","file_permission":"0644","id":"i","content_sha256":"c"}}"#,
        local.path("f")
    );
    let upgraded = local
        .provider
        .upgrade(TYPE, 0, raw.as_bytes())
        .await
        .unwrap();
    assert_eq!(upgraded.diagnostics, vec![]);
    assert_eq!(upgraded.state.attr("content"), &s("x"));
    assert_eq!(upgraded.state.attr("id"), &s("i"));
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_run_concurrently_on_one_process() {
    let local = Local::start().await;
    let local = std::sync::Arc::new(local);
    let mut tasks = Vec::new();
    for i in 0..8 {
        let local = local.clone();
        tasks.push(tokio::spawn(async move {
            let config = local.config(&format!("f{i}"), &format!("{i}\n"));
            local.apply(&Value::Null, &config).await
        }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        let state = task.await.unwrap();
        assert_eq!(state.attr("content"), &s(&format!("{i}\n")));
        assert_eq!(
            std::fs::read_to_string(local.path(&format!("f{i}"))).unwrap(),
            format!("{i}\n")
        );
    }
}
