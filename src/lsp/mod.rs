//! `envc lsp`: the Language Server Protocol over stdio, on `lsp-server` and `lsp-types`
//! (rust-analyzer's crates). The I/O edge around `envc_ide`: it keeps the open documents,
//! analyses each as a root file (as `envc check` would, with its lockfile's pins and the
//! open documents' unsaved text in place of what is on disk), and turns byte offsets into
//! the protocol's positions.
//!
//! Every open document is analysed again after a change (debounced), so a file that
//! imports the edited one shows its new errors too. Nothing outlives its document: the
//! state is the open texts and one analysis of each.

mod convert;
mod handlers;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lsp_server::{Connection, Message, Notification, Request, RequestId, Response};
use lsp_types::notification::{
    DidChangeTextDocument, DidCloseTextDocument, DidOpenTextDocument, DidSaveTextDocument,
    Notification as _, PublishDiagnostics,
};
use lsp_types::{PublishDiagnosticsParams, Uri};
use serde_json::{json, Value};

use envc_compiler::{CompileOptions, LoadError, SourceLoader};
use envc_executor::{split_root, FsLoader};
use envc_ide::Snapshot;

/// How long after the last keystroke diagnostics are computed and sent.
const DEBOUNCE: Duration = Duration::from_millis(150);

/// Why the language server stopped serving before the client said `exit`.
#[derive(Debug)]
pub enum LspError {
    /// The client broke the protocol, or the connection ended in the middle of it.
    Protocol(lsp_server::ProtocolError),
    /// The threads reading and writing stdio failed.
    Io(std::io::Error),
    /// A message could not be sent: the writing side is gone.
    Closed,
}

impl std::fmt::Display for LspError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LspError::Protocol(e) => write!(f, "{e}"),
            LspError::Io(e) => write!(f, "{e}"),
            // crossbeam's own words for it.
            LspError::Closed => f.write_str("sending on a disconnected channel"),
        }
    }
}

impl std::error::Error for LspError {}

pub fn run() -> Result<(), LspError> {
    let (connection, io) = Connection::stdio();
    let result = serve(&connection);
    drop(connection);
    io.join().map_err(LspError::Io)?;
    result
}

fn serve(connection: &Connection) -> Result<(), LspError> {
    let (id, _params) = connection.initialize_start().map_err(LspError::Protocol)?;
    connection
        .initialize_finish(
            id,
            json!({
                "capabilities": handlers::capabilities(),
                "serverInfo": { "name": "envc", "version": env!("CARGO_PKG_VERSION") },
            }),
        )
        .map_err(LspError::Protocol)?;
    let mut server = Server::new(std_dir());
    loop {
        let message = match server.diagnostics_due {
            Some(due) => match connection
                .receiver
                .recv_timeout(due.saturating_duration_since(Instant::now()))
            {
                Ok(m) => Some(m),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => None,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Ok(()),
            },
            None => match connection.receiver.recv() {
                Ok(m) => Some(m),
                Err(_) => return Ok(()),
            },
        };
        match message {
            None => {
                server.diagnostics_due = None;
                for n in server.publish() {
                    send(connection, Message::Notification(n))?;
                }
            }
            Some(Message::Request(req)) => {
                if connection
                    .handle_shutdown(&req)
                    .map_err(LspError::Protocol)?
                {
                    return Ok(());
                }
                let response = server.request(req);
                send(connection, Message::Response(response))?;
            }
            Some(Message::Notification(n)) => {
                if n.method == "exit" {
                    return Ok(());
                }
                server.notification(n);
            }
            Some(Message::Response(_)) => {}
        }
    }
}

fn send(connection: &Connection, m: Message) -> Result<(), LspError> {
    connection.sender.send(m).map_err(|_| LspError::Closed)
}

/// Where go-to-definition finds the standard library: its modules written once, read-only,
/// under the user's cache, by the library's hash (so a new envc never shows an old one).
fn std_dir() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let dir = cache.join("envc").join(format!(
        "std-{}",
        &envc_compiler::stdlib::hash().to_hex()[..16]
    ));
    for (name, text) in envc_compiler::stdlib::MODULES {
        let path = dir.join(format!("{}.env", name.trim_start_matches("std/")));
        if std::fs::read(&path).ok().as_deref() == Some(text.as_bytes()) {
            continue;
        }
        std::fs::create_dir_all(&dir).ok()?;
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, text).ok()?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).ok()?;
    }
    Some(dir)
}

struct Server {
    /// Open documents by path, with their current text.
    docs: BTreeMap<PathBuf, String>,
    /// One analysis per open document, as a root; dropped at every change.
    snapshots: BTreeMap<PathBuf, Snapshot>,
    /// Files diagnostics were last sent for (to clear those that have none now).
    published: BTreeSet<PathBuf>,
    diagnostics_due: Option<Instant>,
    std_dir: Option<PathBuf>,
}

impl Server {
    fn new(std_dir: Option<PathBuf>) -> Server {
        Server {
            docs: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            published: BTreeSet::new(),
            diagnostics_due: None,
            std_dir,
        }
    }

    fn changed(&mut self, delay: Duration) {
        self.snapshots.clear();
        self.diagnostics_due = Some(Instant::now() + delay);
    }

    fn notification(&mut self, n: Notification) {
        match n.method.as_str() {
            DidOpenTextDocument::METHOD => {
                if let Ok(p) =
                    serde_json::from_value::<lsp_types::DidOpenTextDocumentParams>(n.params)
                {
                    if let Some(path) = convert::path(&p.text_document.uri) {
                        self.docs.insert(path, p.text_document.text);
                        self.changed(Duration::ZERO);
                    }
                }
            }
            DidChangeTextDocument::METHOD => {
                if let Ok(p) =
                    serde_json::from_value::<lsp_types::DidChangeTextDocumentParams>(n.params)
                {
                    let Some(path) = convert::path(&p.text_document.uri) else {
                        return;
                    };
                    let Some(text) = self.docs.get_mut(&path) else {
                        return;
                    };
                    for change in p.content_changes {
                        match change.range {
                            Some(r) => {
                                let span = convert::span(text, r);
                                text.replace_range(span.range(), &change.text);
                            }
                            None => *text = change.text,
                        }
                    }
                    self.changed(DEBOUNCE);
                }
            }
            DidCloseTextDocument::METHOD => {
                if let Ok(p) =
                    serde_json::from_value::<lsp_types::DidCloseTextDocumentParams>(n.params)
                {
                    if let Some(path) = convert::path(&p.text_document.uri) {
                        self.docs.remove(&path);
                        self.changed(Duration::ZERO);
                    }
                }
            }
            // Files on disk may have changed under the other open documents.
            DidSaveTextDocument::METHOD => self.changed(Duration::ZERO),
            _ => {}
        }
    }

    /// Makes sure the open document at `path` has its analysis, as a root file.
    fn analyse(&mut self, path: &Path) {
        if !self.docs.contains_key(path) {
            return;
        }
        if !self.snapshots.contains_key(path) {
            let (dir, name) = split_root(path);
            let loader = Overlay {
                dir: dir.clone(),
                disk: FsLoader::new(&dir),
                docs: &self.docs,
            };
            // The lockfile's pins, as `envc check` uses them; an unreadable lockfile is
            // `envc lock`'s to report, not the editor's.
            let pins = envc_lockfiles::read_lock(path)
                .ok()
                .flatten()
                .map(|l| l.lock.pins())
                .unwrap_or_default();
            // The packs its envc.toml names, as `envc check` reads them; one that cannot be
            // read is `check`'s to report.
            let params = crate::commands::Params::default();
            let policy_packs = crate::commands::policy_packs(path, &params).unwrap_or_default();
            // The project's `[params]`, as every command compiles with them.
            let project = envc_executor::project_dir(path);
            let options = CompileOptions {
                pins,
                policy_packs,
                params: envc_executor::project_params(&project).unwrap_or_default(),
                ..Default::default()
            };
            let snapshot = Snapshot::analyze(&name, &loader, &options);
            self.snapshots.insert(path.to_path_buf(), snapshot);
        }
    }

    /// Diagnostics of every open document's analysis, by the file they are in, and empty
    /// lists for open documents without any and files that had some and have none now.
    fn publish(&mut self) -> Vec<Notification> {
        let mut by_file: BTreeMap<PathBuf, Vec<lsp_types::Diagnostic>> = BTreeMap::new();
        let roots: Vec<PathBuf> = self
            .docs
            .keys()
            .filter(|p| !self.is_std_copy(p))
            .cloned()
            .collect();
        // Every open document gets an answer, an empty one when it is clean.
        for root in &roots {
            by_file.insert(root.clone(), Vec::new());
        }
        for root in roots {
            self.analyse(&root);
            let Some(s) = self.snapshots.get(&root) else {
                continue;
            };
            let files = Files {
                root: &root,
                std_dir: self.std_dir.as_deref(),
            };
            let errors = s.diagnostics().iter().map(|d| (d, false));
            let all = errors.chain(s.warnings().iter().map(|d| (d, true)));
            for (d, warning) in all.flat_map(|(d, w)| at_each_offender(d).map(move |d| (d, w))) {
                let d = &*d;
                let Some(label) = d.labels.first() else {
                    continue;
                };
                let Some(path) = files.path(&s.sources().get(label.file).name) else {
                    continue;
                };
                let d = handlers::diagnostic(s, d, &files, warning);
                let list = by_file.entry(path).or_default();
                if !list.contains(&d) {
                    list.push(d);
                }
            }
        }
        let mut out = Vec::new();
        let stale: Vec<PathBuf> = self
            .published
            .iter()
            .filter(|p| !by_file.contains_key(*p))
            .cloned()
            .collect();
        for p in stale {
            by_file.insert(p, Vec::new());
        }
        self.published = by_file
            .iter()
            .filter(|(_, ds)| !ds.is_empty())
            .map(|(p, _)| p.clone())
            .collect();
        for (path, diagnostics) in by_file {
            let Some(uri) = convert::uri(&path) else {
                continue;
            };
            let params = PublishDiagnosticsParams {
                uri,
                diagnostics,
                version: None,
            };
            out.push(Notification::new(
                PublishDiagnostics::METHOD.to_string(),
                params,
            ));
        }
        out
    }

    fn is_std_copy(&self, path: &Path) -> bool {
        self.std_dir.as_ref().is_some_and(|d| path.starts_with(d))
    }

    fn request(&mut self, req: Request) -> Response {
        let id = req.id.clone();
        // A panic is a bug, and it costs this one answer, not the editor's session.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handlers::handle(self, &req.method, req.params)
        }));
        match result {
            Ok(Ok(value)) => Response::new_ok(id, value),
            Ok(Err(e)) => error(id, e),
            Err(_) => {
                self.snapshots.clear();
                Response::new_err(
                    id,
                    lsp_server::ErrorCode::InternalError as i32,
                    format!("envc lsp failed on {}: this is a bug in envc", req.method),
                )
            }
        }
    }
}

/// Where the files of one analysis are.
struct Files<'a> {
    root: &'a Path,
    std_dir: Option<&'a Path>,
}

impl Files<'_> {
    /// The file a source `name` of the analysis stands for: a project file beside the
    /// root, or a standard library module in the read-only copy.
    fn path(&self, name: &str) -> Option<PathBuf> {
        if let Some(module) = name.strip_prefix("std/") {
            return Some(self.std_dir?.join(format!("{module}.env")));
        }
        if name.starts_with("--set") {
            return None;
        }
        let (dir, _) = split_root(self.root);
        // `../lib/x.env` beside the root file's directory: the editor names it plainly.
        Some(crate::commands::lexical(&dir.join(name)))
    }

    fn uri(&self, name: &str) -> Option<Uri> {
        convert::uri(&self.path(name)?)
    }
}

/// A broken policy is shown at each node that breaks it (with the policy as related
/// information): the policy may be in a pack the editor has not opened, and the node is what
/// the user changes. Any other diagnostic is shown as it is.
fn at_each_offender(
    d: &envc_lang::Diagnostic,
) -> Box<dyn Iterator<Item = std::borrow::Cow<'_, envc_lang::Diagnostic>> + '_> {
    use std::borrow::Cow;
    match d.labels.split_first() {
        Some((policy, offenders)) if d.code == "policy::violation" && !offenders.is_empty() => {
            Box::new(offenders.iter().map(move |l| {
                let mut one = d.clone();
                one.labels = vec![l.clone(), policy.clone()];
                Cow::Owned(one)
            }))
        }
        _ => Box::new(std::iter::once(Cow::Borrowed(d))),
    }
}

/// Why a request got no answer.
enum RequestError {
    /// Not a method this server knows.
    Unknown,
    /// Its parameters do not parse.
    Params(String),
    /// It cannot be done (a rename to a taken name): said to the user.
    Refused(String),
}

fn error(id: RequestId, e: RequestError) -> Response {
    let (code, message) = match e {
        RequestError::Unknown => (
            lsp_server::ErrorCode::MethodNotFound,
            "unknown method".to_string(),
        ),
        RequestError::Params(m) => (lsp_server::ErrorCode::InvalidParams, m),
        RequestError::Refused(m) => (lsp_server::ErrorCode::RequestFailed, m),
    };
    Response::new_err(id, code as i32, message)
}

/// The project's files, with the open documents' unsaved text in place of the disk's.
struct Overlay<'d> {
    dir: PathBuf,
    disk: FsLoader,
    docs: &'d BTreeMap<PathBuf, String>,
}

impl SourceLoader for Overlay<'_> {
    fn project_root(&self) -> envc_compiler::ProjectRoot {
        self.disk.project_root()
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, LoadError> {
        self.read_at_most(path, envc_executor::MAX_PROJECT_FILE_BYTES)
    }

    fn read_at_most(&self, path: &str, limit: u64) -> Result<Vec<u8>, LoadError> {
        match self
            .docs
            .get(&crate::commands::lexical(&self.dir.join(path)))
        {
            Some(text) => Ok(text.as_bytes().to_vec()),
            None => self.disk.read_at_most(path, limit),
        }
    }
}

/// The JSON of a result.
fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}
