//! The client against a provider built with HashiCorp's Go SDK (workato 0.16.0, as PyPI's
//! workato-terraform-provider ships it, protocol 6): go-plugin's own handshake and AutoMTLS
//! (a unix socket, a P-521 certificate, a client certificate required), its real schema,
//! its validation, and planning offline. Applying needs Workato's service: the provider is
//! pointed at a loopback port that closes every connection, and each test says where it
//! stopped.
#![allow(clippy::unwrap_used)]

mod support;

use envc_tfplugin::handshake::Network;
use envc_tfplugin::{Nesting, PathStep, Provider, Value};
use support::{obj, s};

/// A port on loopback that accepts and at once closes: Workato's API, unreachable.
fn closing_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for connection in listener.incoming() {
            drop(connection);
        }
    });
    port
}

async fn configured() -> Provider {
    let provider = support::start(&support::workato_executable()).await;
    let config = obj(&[
        ("api_key", s("test-key")),
        (
            "base_url",
            s(&format!("https://127.0.0.1:{}", closing_port())),
        ),
    ]);
    assert_eq!(
        provider.validate_provider_config(&config).await.unwrap(),
        vec![]
    );
    assert_eq!(provider.configure(&config).await.unwrap(), vec![]);
    provider
}

fn folder(name: Option<&str>) -> Value {
    let mut pairs = vec![("folder_id", Value::Number("1".into()))];
    if let Some(name) = name {
        pairs.push(("name", s(name)));
    }
    obj(&pairs)
}

#[tokio::test(flavor = "multi_thread")]
async fn go_plugin_hands_back_a_unix_socket_behind_mutual_tls() {
    let provider = support::start(&support::workato_executable()).await;
    assert_eq!(provider.handshake.protocol, 6);
    assert_eq!(provider.handshake.network, Network::Unix);
    // AutoMTLS: given envc's certificate, it printed its own, and the calls below went
    // through TLS that pinned it.
    assert!(provider.handshake.server_cert.is_some());
    assert!(
        provider.handshake.address.contains("envc-provider-"),
        "{}",
        provider.handshake.address
    );
    assert!(!provider.schema().await.unwrap().resources.is_empty());
    let pid = provider.pid().unwrap();
    let socket = std::path::PathBuf::from(&provider.handshake.address);
    provider.shutdown().await;
    assert!(!support::alive(pid));
    assert!(!socket.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn its_real_schema_maps_to_envc_types() {
    let provider = support::start(&support::workato_executable()).await;
    let schema = provider.schema().await.unwrap();
    assert_eq!(schema.resources.len(), 14, "{:?}", schema.resources.keys());
    assert!(schema.data_sources.is_empty());
    let config = &schema.provider.block.attributes;
    assert!(config["api_key"].required && config["api_key"].sensitive);
    assert_eq!(config["timeout_seconds"].ty.describe(), "number");

    // (resource, attribute) → type, required, optional, computed, sensitive
    let cases = [
        ("workato_folder", "name", "string", "r"),
        ("workato_folder", "folder_id", "number", "r"),
        ("workato_folder", "id", "string", "oc"),
        ("workato_connection", "input", "string", "os"),
        ("workato_agentic_skill", "applications", "list(string)", "c"),
        ("workato_mcp_server", "tools", "list(map(string))", "o"),
        (
            "workato_recipe",
            "unauthorized_connections",
            "list(object({ account_id = number, name = string, provider = string }))",
            "c",
        ),
    ];
    for (resource, attribute, ty, flags) in cases {
        let a = &schema.resources[resource].block.attributes[attribute];
        let got: String = [
            (a.required, 'r'),
            (a.optional, 'o'),
            (a.computed, 'c'),
            (a.sensitive, 's'),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, c)| *c)
        .collect();
        assert_eq!(
            (a.ty.describe().as_str(), got.as_str()),
            (ty, flags),
            "{resource}.{attribute}"
        );
    }
    // Nested blocks, two deep.
    let column = &schema.resources["workato_data_table"].block.blocks["column"];
    assert_eq!(column.nesting, Nesting::List);
    assert_eq!(column.block.blocks["relation"].nesting, Nesting::List);
    // The schema's bytes decode to the same schema offline.
    let bytes = provider.schema_bytes().await.unwrap();
    assert_eq!(
        &envc_tfplugin::ProviderSchema::decode(&bytes).unwrap(),
        schema.as_ref()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn validation_says_what_is_missing_and_where() {
    let provider = support::start(&support::workato_executable()).await;
    let diagnostics = provider
        .validate_resource_config("workato_folder", &folder(None))
        .await
        .unwrap();
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert!(diagnostics[0].is_error());
    assert_eq!(diagnostics[0].summary, "Missing required argument");
    assert_eq!(
        diagnostics[0].path,
        vec![PathStep::Attribute("name".into())]
    );
    let diagnostics = provider
        .configure(&obj(&[
            ("api_key", s("k")),
            ("base_url", s("http://127.0.0.1:1")),
        ]))
        .await
        .unwrap();
    assert_eq!(
        diagnostics[0].summary,
        "base_url must start with https:// (http:// is not allowed)"
    );
    let err = provider
        .validate_resource_config("workato_fodler", &Value::Null)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("it has no resource type `workato_fodler`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn it_plans_offline_and_stops_at_its_service_to_apply() {
    let provider = configured().await;
    let config = folder(Some("envc"));
    let schema = provider.schema().await.unwrap();
    let proposed = schema.resources["workato_folder"]
        .block
        .proposed_new(&Value::Null, &config);
    let planned = provider
        .plan("workato_folder", &Value::Null, &proposed, &config, &[])
        .await
        .unwrap();
    assert_eq!(planned.diagnostics, vec![]);
    assert_eq!(planned.planned_state.attr("name"), &s("envc"));
    assert_eq!(planned.planned_state.attr("id"), &Value::Unknown);
    assert_eq!(planned.planned_state.attr("created_at"), &Value::Unknown);
    assert!(
        !planned.planned_private.is_empty(),
        "the SDK keeps private state through the plan"
    );

    // Apply: the SDK looks the folder up first, and that is where it stops.
    let applied = provider
        .apply(
            "workato_folder",
            &Value::Null,
            &planned.planned_state,
            &config,
            &planned.planned_private,
        )
        .await
        .unwrap();
    assert_eq!(applied.state, Value::Null);
    assert_eq!(applied.diagnostics.len(), 1);
    assert!(
        applied.diagnostics[0]
            .summary
            .starts_with("find folder by name+folder_id failed: Get \"https://127.0.0.1:"),
        "{:?}",
        applied.diagnostics
    );

    // Import needs no service (the SDK's passthrough), nor does upgrading or planning a destroy.
    let imported = provider.import("workato_folder", "7").await.unwrap();
    assert_eq!(imported.resources[0].1.state.attr("id"), &s("7"));
    let upgraded = provider
        .upgrade(
            "workato_folder",
            0,
            br#"{"id":"7","name":"envc","folder_id":1}"#,
        )
        .await
        .unwrap();
    assert_eq!(upgraded.state.attr("folder_id"), &Value::Number("1".into()));
    let state = upgraded.state;
    let destroy = provider
        .plan("workato_folder", &state, &Value::Null, &Value::Null, &[])
        .await
        .unwrap();
    assert_eq!(
        (destroy.planned_state, destroy.diagnostics),
        (Value::Null, vec![])
    );
    // Reading it back needs the service.
    let read = provider.read("workato_folder", &state, &[]).await.unwrap();
    assert!(
        read.diagnostics[0]
            .summary
            .starts_with("find folder by id failed"),
        "{:?}",
        read.diagnostics
    );
    provider.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_provider_kills_it() {
    let provider = support::start(&support::workato_executable()).await;
    let pid = provider.pid().unwrap();
    assert!(support::alive(pid));
    drop(provider);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while support::alive(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!support::alive(pid));
}
