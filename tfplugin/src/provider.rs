//! One provider process and the calls envc makes to it.
//!
//! The process is started with the magic cookie and envc's client certificate, in a
//! process group of its own (a Ctrl-C at the terminal reaches envc, which stops it, not the
//! provider mid-call) and with the parent-death signal set, so that a SIGKILLed envc leaves
//! no provider behind. Dropping a [`Provider`] kills it; [`Provider::shutdown`] asks first.
//! Its stderr is its log: each line goes to the caller's log and the last ones are kept for
//! errors.
//!
//! Calls take `&self`: a provider serves calls concurrently, and envc's `-j` decides how
//! many are in flight.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::OnceCell;
use tonic::transport::{Channel, Endpoint};

use crate::cty::{Type, Value};
use crate::diagnostic::{path_from_wire, Diagnostic, PathStep};
use crate::error::{PluginError, Problem, ValueError};
use crate::handshake::{self, Handshake, Network};
use crate::schema::{ProviderSchema, Schema};
use crate::tls::ClientIdentity;
use crate::wire;

/// How many of the provider's last stderr lines an error shows.
const STDERR_TAIL: usize = 20;

/// A schema of a large provider is tens of megabytes; gRPC's default limit is 4 MiB.
const MAX_MESSAGE: usize = 256 * 1024 * 1024;

/// The version envc reports as the "Terraform version" in ConfigureProvider. Providers log
/// it and a few gate features on it; envc speaks the protocol of Terraform 1.x.
const HOST_VERSION: &str = "1.9.0";

pub type LogSink = Arc<dyn Fn(&str) + Send + Sync>;

pub struct StartOptions {
    /// Added to the environment envc runs in, which the provider inherits as it does under
    /// Terraform (credentials in the environment are how most providers find them).
    pub env: Vec<(String, String)>,
    /// How long the provider may take to print its handshake.
    pub handshake_timeout: Duration,
    /// Where each line the provider writes on stderr goes.
    pub log: Option<LogSink>,
}

impl Default for StartOptions {
    fn default() -> StartOptions {
        // Terraform's own start timeout.
        StartOptions {
            env: Vec::new(),
            handshake_timeout: Duration::from_secs(60),
            log: None,
        }
    }
}

pub struct Provider {
    executable: PathBuf,
    child: Child,
    channel: Channel,
    pub handshake: Handshake,
    stderr: Arc<Mutex<VecDeque<String>>>,
    schema: OnceCell<Arc<ProviderSchema>>,
    schema_bytes: OnceCell<Vec<u8>>,
    /// Declared after `child`, so it is removed after the process is killed.
    _sockets: tempfile::TempDir,
}

/// A planned change of one resource: what its state will be, and which changed
/// attributes force a replacement.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    pub planned_state: Value,
    pub requires_replace: Vec<Vec<PathStep>>,
    pub planned_private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
    /// The provider deferred the change (it cannot plan it yet).
    pub deferred: bool,
}

/// A resource's state as the provider answers it, after an apply, a read or an import.
#[derive(Clone, Debug, PartialEq)]
pub struct Answered {
    pub state: Value,
    pub private: Vec<u8>,
    pub diagnostics: Vec<Diagnostic>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Imported {
    pub resources: Vec<(String, Answered)>,
    pub diagnostics: Vec<Diagnostic>,
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

impl Provider {
    pub async fn start(executable: &Path, options: StartOptions) -> Result<Provider, PluginError> {
        let identity = ClientIdentity::new().map_err(|problem| PluginError::Handshake {
            executable: executable.to_path_buf(),
            problem: problem.0,
            stderr: Vec::new(),
        })?;
        // go-plugin leaves its socket behind when it is killed; in a directory of envc's
        // own, it goes with the Provider.
        let sockets = tempfile::Builder::new()
            .prefix("envc-provider-")
            .tempdir()
            .map_err(|source| PluginError::Start {
                executable: executable.to_path_buf(),
                source,
            })?;
        let versions = handshake::PROTOCOL_VERSIONS
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut command = Command::new(executable);
        command
            .env(handshake::MAGIC_COOKIE_KEY, handshake::MAGIC_COOKIE_VALUE)
            .env("PLUGIN_PROTOCOL_VERSIONS", versions)
            .env("PLUGIN_CLIENT_CERT", &identity.pem)
            .env("PLUGIN_UNIX_SOCKET_DIR", sockets.path())
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe and touches only the child's own state.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|source| PluginError::Start {
            executable: executable.to_path_buf(),
            source,
        })?;

        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let mut stderr_reader = None;
        if let Some(err) = child.stderr.take() {
            let tail = stderr.clone();
            let log = options.log.clone();
            stderr_reader = Some(tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(log) = &log {
                        log(&line);
                    }
                    if let Ok(mut tail) = tail.lock() {
                        if tail.len() == STDERR_TAIL {
                            tail.pop_front();
                        }
                        tail.push_back(line);
                    }
                }
            }));
        }
        let tail = |stderr: &Arc<Mutex<VecDeque<String>>>| -> Vec<String> {
            stderr
                .lock()
                .map(|t| t.iter().cloned().collect())
                .unwrap_or_default()
        };
        let fail =
            |problem: String, stderr: &Arc<Mutex<VecDeque<String>>>| PluginError::Handshake {
                executable: executable.to_path_buf(),
                problem,
                stderr: tail(stderr),
            };

        let Some(out) = child.stdout.take() else {
            return Err(fail("its stdout was not captured".into(), &stderr));
        };
        let mut out = BufReader::new(out);
        let mut line = String::new();
        let read = tokio::time::timeout(options.handshake_timeout, out.read_line(&mut line)).await;
        let handshake = match read {
            Err(_) => {
                return Err(fail(
                    format!(
                        "it printed no handshake within {} s",
                        options.handshake_timeout.as_secs()
                    ),
                    &stderr,
                ))
            }
            Ok(Err(e)) => return Err(fail(format!("reading its handshake: {e}"), &stderr)),
            Ok(Ok(0)) => {
                let status = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
                // The reader ends at stderr's end, so its tail holds the last lines; a
                // child the provider left holding stderr open is not waited for long.
                if let Some(reader) = stderr_reader {
                    let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
                }
                let how = match status {
                    Ok(Ok(s)) => format!("it exited ({s}) before its handshake"),
                    _ => "it closed stdout before its handshake".to_string(),
                };
                return Err(fail(how, &stderr));
            }
            Ok(Ok(_)) => handshake::parse(&line).map_err(|p| fail(p.0, &stderr))?,
        };
        // Whatever else it prints on stdout is drained, so a chatty provider never blocks
        // on a full pipe.
        let log = options.log.clone();
        tokio::spawn(async move {
            let mut lines = out.lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(log) = &log {
                    log(&line);
                }
            }
        });

        let tls = match &handshake.server_cert {
            Some(cert) => {
                Some(
                    identity
                        .config(cert.clone())
                        .map_err(|problem| PluginError::Connect {
                            executable: executable.to_path_buf(),
                            problem: problem.0,
                            stderr: tail(&stderr),
                        })?,
                )
            }
            None => None,
        };
        let channel = connect(&handshake, tls)
            .await
            .map_err(|problem| PluginError::Connect {
                executable: executable.to_path_buf(),
                problem: problem.0,
                stderr: tail(&stderr),
            })?;
        Ok(Provider {
            executable: executable.to_path_buf(),
            child,
            channel,
            handshake,
            stderr,
            schema: OnceCell::new(),
            schema_bytes: OnceCell::new(),
            _sockets: sockets,
        })
    }

    pub fn executable(&self) -> &Path {
        &self.executable
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    fn stderr_tail(&self) -> Vec<String> {
        self.stderr
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    async fn call<Req, Resp>(
        &self,
        service: &str,
        method: &'static str,
        request: Req,
    ) -> Result<Resp, PluginError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let rpc_error = |status: tonic::Status| PluginError::Rpc {
            executable: self.executable.clone(),
            method,
            status: Box::new(status),
            stderr: self.stderr_tail(),
        };
        let mut grpc = tonic::client::Grpc::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE);
        grpc.ready()
            .await
            .map_err(|e| rpc_error(tonic::Status::unavailable(e.to_string())))?;
        let path = http::uri::PathAndQuery::try_from(format!("/{service}/{method}"))
            .map_err(|e| rpc_error(tonic::Status::internal(e.to_string())))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        grpc.unary(tonic::Request::new(request), path, codec)
            .await
            .map(tonic::Response::into_inner)
            .map_err(rpc_error)
    }

    async fn provider_call<Req, Resp>(
        &self,
        method: &'static str,
        request: Req,
    ) -> Result<Resp, PluginError>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.call("tfplugin6.Provider", method, request).await
    }

    /// The provider's schema, asked once per process.
    pub async fn schema(&self) -> Result<Arc<ProviderSchema>, PluginError> {
        self.schema
            .get_or_try_init(|| async {
                let response: wire::GetProviderSchemaResponse = self
                    .provider_call("GetProviderSchema", wire::Empty {})
                    .await?;
                let bytes = prost::Message::encode_to_vec(&response);
                let _ = self.schema_bytes.set(bytes);
                let schema =
                    ProviderSchema::from_wire(response).map_err(|error| PluginError::Value {
                        executable: self.executable.clone(),
                        method: "GetProviderSchema",
                        error,
                    })?;
                Ok(Arc::new(schema))
            })
            .await
            .cloned()
    }

    /// GetProviderSchema's answer as it came, for a cache to keep ([`ProviderSchema::decode`]).
    pub async fn schema_bytes(&self) -> Result<Vec<u8>, PluginError> {
        self.schema().await?;
        Ok(self.schema_bytes.get().cloned().unwrap_or_default())
    }

    async fn resource_schema(
        &self,
        type_name: &str,
        data: bool,
    ) -> Result<(Arc<ProviderSchema>, Type), PluginError> {
        let schema = self.schema().await?;
        let table = if data {
            &schema.data_sources
        } else {
            &schema.resources
        };
        let Some(Schema { block, .. }) = table.get(type_name) else {
            let what = if data { "data source" } else { "resource type" };
            return Err(PluginError::Schema {
                executable: self.executable.clone(),
                problem: format!("it has no {what} `{type_name}`"),
            });
        };
        let ty = block.implied_type();
        Ok((schema.clone(), ty))
    }

    fn encode(
        &self,
        method: &'static str,
        value: &Value,
        ty: &Type,
    ) -> Result<wire::DynamicValue, PluginError> {
        let msgpack = value
            .to_msgpack(ty)
            .map_err(|error| self.value_error(method, error))?;
        Ok(wire::DynamicValue {
            msgpack,
            json: Vec::new(),
        })
    }

    fn decode(
        &self,
        method: &'static str,
        value: Option<wire::DynamicValue>,
        ty: &Type,
    ) -> Result<Value, PluginError> {
        let Some(value) = value else {
            return Ok(Value::Null);
        };
        let decoded = if !value.msgpack.is_empty() {
            Value::from_msgpack(&value.msgpack, ty)
        } else if !value.json.is_empty() {
            serde_json::from_slice(&value.json)
                .map_err(|e| ValueError::new(format!("JSON that does not parse: {e}")))
                .and_then(|json| Value::from_json(&json, ty))
        } else {
            Ok(Value::Null)
        };
        decoded.map_err(|error| self.value_error(method, error))
    }

    fn value_error(&self, method: &'static str, error: ValueError) -> PluginError {
        PluginError::Value {
            executable: self.executable.clone(),
            method,
            error,
        }
    }

    fn diagnostics(list: Vec<wire::Diagnostic>) -> Vec<Diagnostic> {
        list.into_iter().map(Diagnostic::from_wire).collect()
    }

    pub async fn validate_provider_config(
        &self,
        config: &Value,
    ) -> Result<Vec<Diagnostic>, PluginError> {
        let ty = self.schema().await?.provider.block.implied_type();
        let request = wire::ValidateProviderConfigRequest {
            config: Some(self.encode("ValidateProviderConfig", config, &ty)?),
        };
        let response: wire::ValidateProviderConfigResponse = self
            .provider_call("ValidateProviderConfig", request)
            .await?;
        Ok(Self::diagnostics(response.diagnostics))
    }

    pub async fn configure(&self, config: &Value) -> Result<Vec<Diagnostic>, PluginError> {
        let ty = self.schema().await?.provider.block.implied_type();
        let request = wire::ConfigureProviderRequest {
            terraform_version: HOST_VERSION.to_string(),
            config: Some(self.encode("ConfigureProvider", config, &ty)?),
            client_capabilities: Some(capabilities()),
        };
        let response: wire::DiagnosticsResponse =
            self.provider_call("ConfigureProvider", request).await?;
        Ok(Self::diagnostics(response.diagnostics))
    }

    pub async fn validate_resource_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>, PluginError> {
        let (_, ty) = self.resource_schema(type_name, false).await?;
        let request = wire::ValidateRequest {
            type_name: type_name.to_string(),
            config: Some(self.encode("ValidateResourceConfig", config, &ty)?),
        };
        let response: wire::DiagnosticsResponse = self
            .provider_call("ValidateResourceConfig", request)
            .await?;
        Ok(Self::diagnostics(response.diagnostics))
    }

    pub async fn validate_data_source_config(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Vec<Diagnostic>, PluginError> {
        let (_, ty) = self.resource_schema(type_name, true).await?;
        let request = wire::ValidateRequest {
            type_name: type_name.to_string(),
            config: Some(self.encode("ValidateDataResourceConfig", config, &ty)?),
        };
        let response: wire::DiagnosticsResponse = self
            .provider_call("ValidateDataResourceConfig", request)
            .await?;
        Ok(Self::diagnostics(response.diagnostics))
    }

    /// Plans a change from `prior` (null: a create) to `proposed` (null: a destroy).
    pub async fn plan(
        &self,
        type_name: &str,
        prior: &Value,
        proposed: &Value,
        config: &Value,
        prior_private: &[u8],
    ) -> Result<Planned, PluginError> {
        const METHOD: &str = "PlanResourceChange";
        let (_, ty) = self.resource_schema(type_name, false).await?;
        let request = wire::PlanResourceChangeRequest {
            type_name: type_name.to_string(),
            prior_state: Some(self.encode(METHOD, prior, &ty)?),
            proposed_new_state: Some(self.encode(METHOD, proposed, &ty)?),
            config: Some(self.encode(METHOD, config, &ty)?),
            prior_private: prior_private.to_vec(),
            client_capabilities: Some(capabilities()),
        };
        let response: wire::PlanResourceChangeResponse =
            self.provider_call(METHOD, request).await?;
        Ok(Planned {
            planned_state: self.decode(METHOD, response.planned_state, &ty)?,
            requires_replace: response
                .requires_replace
                .into_iter()
                .map(path_from_wire)
                .collect(),
            planned_private: response.planned_private,
            diagnostics: Self::diagnostics(response.diagnostics),
            deferred: response.deferred.is_some(),
        })
    }

    pub async fn apply(
        &self,
        type_name: &str,
        prior: &Value,
        planned: &Value,
        config: &Value,
        planned_private: &[u8],
    ) -> Result<Answered, PluginError> {
        const METHOD: &str = "ApplyResourceChange";
        let (_, ty) = self.resource_schema(type_name, false).await?;
        let request = wire::ApplyResourceChangeRequest {
            type_name: type_name.to_string(),
            prior_state: Some(self.encode(METHOD, prior, &ty)?),
            planned_state: Some(self.encode(METHOD, planned, &ty)?),
            config: Some(self.encode(METHOD, config, &ty)?),
            planned_private: planned_private.to_vec(),
        };
        let response: wire::ApplyResourceChangeResponse =
            self.provider_call(METHOD, request).await?;
        Ok(Answered {
            state: self.decode(METHOD, response.new_state, &ty)?,
            private: response.private,
            diagnostics: Self::diagnostics(response.diagnostics),
        })
    }

    /// What the resource is now. A null state means it is gone.
    pub async fn read(
        &self,
        type_name: &str,
        current: &Value,
        private: &[u8],
    ) -> Result<Answered, PluginError> {
        const METHOD: &str = "ReadResource";
        let (_, ty) = self.resource_schema(type_name, false).await?;
        let request = wire::ReadResourceRequest {
            type_name: type_name.to_string(),
            current_state: Some(self.encode(METHOD, current, &ty)?),
            private: private.to_vec(),
            client_capabilities: Some(capabilities()),
        };
        let response: wire::ReadResourceResponse = self.provider_call(METHOD, request).await?;
        Ok(Answered {
            state: self.decode(METHOD, response.new_state, &ty)?,
            private: response.private,
            diagnostics: Self::diagnostics(response.diagnostics),
        })
    }

    pub async fn import(&self, type_name: &str, id: &str) -> Result<Imported, PluginError> {
        const METHOD: &str = "ImportResourceState";
        self.resource_schema(type_name, false).await?;
        let request = wire::ImportResourceStateRequest {
            type_name: type_name.to_string(),
            id: id.to_string(),
            client_capabilities: Some(capabilities()),
        };
        let response: wire::ImportResourceStateResponse =
            self.provider_call(METHOD, request).await?;
        let mut resources = Vec::new();
        for r in response.imported_resources {
            let (_, ty) = self.resource_schema(&r.type_name, false).await?;
            let state = self.decode(METHOD, r.state, &ty)?;
            resources.push((
                r.type_name,
                Answered {
                    state,
                    private: r.private,
                    diagnostics: Vec::new(),
                },
            ));
        }
        Ok(Imported {
            resources,
            diagnostics: Self::diagnostics(response.diagnostics),
        })
    }

    /// A state written under schema `version`, as the provider's current schema reads it.
    pub async fn upgrade(
        &self,
        type_name: &str,
        version: i64,
        raw_json: &[u8],
    ) -> Result<Answered, PluginError> {
        const METHOD: &str = "UpgradeResourceState";
        let (_, ty) = self.resource_schema(type_name, false).await?;
        let request = wire::UpgradeResourceStateRequest {
            type_name: type_name.to_string(),
            version,
            raw_state: Some(wire::RawState {
                json: raw_json.to_vec(),
            }),
        };
        let response: wire::UpgradeResourceStateResponse =
            self.provider_call(METHOD, request).await?;
        Ok(Answered {
            state: self.decode(METHOD, response.upgraded_state, &ty)?,
            private: Vec::new(),
            diagnostics: Self::diagnostics(response.diagnostics),
        })
    }

    pub async fn read_data_source(
        &self,
        type_name: &str,
        config: &Value,
    ) -> Result<Answered, PluginError> {
        const METHOD: &str = "ReadDataSource";
        let (_, ty) = self.resource_schema(type_name, true).await?;
        let request = wire::ReadDataSourceRequest {
            type_name: type_name.to_string(),
            config: Some(self.encode(METHOD, config, &ty)?),
            client_capabilities: Some(capabilities()),
        };
        let response: wire::ReadDataSourceResponse = self.provider_call(METHOD, request).await?;
        Ok(Answered {
            state: self.decode(METHOD, response.state, &ty)?,
            private: Vec::new(),
            diagnostics: Self::diagnostics(response.diagnostics),
        })
    }

    /// Asks the provider to cancel what it is doing (StopProvider); its calls in flight end
    /// with errors of their own.
    pub async fn stop(&self) -> Result<(), PluginError> {
        let response: wire::StopProviderResponse =
            self.provider_call("StopProvider", wire::Empty {}).await?;
        if response.error.is_empty() {
            Ok(())
        } else {
            Err(PluginError::Rpc {
                executable: self.executable.clone(),
                method: "StopProvider",
                status: Box::new(tonic::Status::unknown(response.error)),
                stderr: self.stderr_tail(),
            })
        }
    }

    /// Ends the process: go-plugin's Shutdown, a short wait, then SIGKILL. Never leaves it
    /// running, whatever the provider answers.
    pub async fn shutdown(mut self) {
        let asked = tokio::time::timeout(
            Duration::from_secs(2),
            self.call::<_, wire::Empty>("plugin.GRPCController", "Shutdown", wire::Empty {}),
        )
        .await;
        // A Go provider exits before it answers, so the call ends as a closed stream.
        let exiting = match &asked {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => e.is_transport(),
            Err(_) => false,
        };
        if exiting
            && tokio::time::timeout(Duration::from_secs(2), self.child.wait())
                .await
                .is_ok()
        {
            return;
        }
        let _ = self.child.kill().await;
    }
}

fn capabilities() -> wire::ClientCapabilities {
    wire::ClientCapabilities {
        deferral_allowed: false,
        write_only_attributes_allowed: false,
    }
}

async fn connect(
    handshake: &Handshake,
    tls: Option<Arc<rustls::ClientConfig>>,
) -> Result<Channel, Problem> {
    let network = handshake.network.clone();
    let address = handshake.address.clone();
    // The URI is only gRPC's :authority; the connector below decides where bytes go.
    let endpoint =
        Endpoint::from_static("http://localhost").connect_timeout(Duration::from_secs(10));
    endpoint
        .connect_with_connector(tower::service_fn(move |_: http::Uri| {
            let network = network.clone();
            let address = address.clone();
            let tls = tls.clone();
            async move {
                let stream: Box<dyn Io> = match network {
                    Network::Unix => Box::new(tokio::net::UnixStream::connect(&address).await?),
                    Network::Tcp => Box::new(tokio::net::TcpStream::connect(&address).await?),
                };
                let stream: Box<dyn Io> = match tls {
                    Some(config) => {
                        let name = rustls::pki_types::ServerName::try_from("localhost")
                            .map_err(|e| std::io::Error::other(e.to_string()))?;
                        Box::new(
                            tokio_rustls::TlsConnector::from(config)
                                .connect(name, stream)
                                .await?,
                        )
                    }
                    None => stream,
                };
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| {
            use std::error::Error;
            let mut text = e.to_string();
            let mut source = e.source();
            while let Some(s) = source {
                // tonic's errors already end with their source's text.
                let more = s.to_string();
                if !text.ends_with(&more) {
                    text.push_str(&format!(": {more}"));
                }
                source = s.source();
            }
            Problem(text)
        })
}
