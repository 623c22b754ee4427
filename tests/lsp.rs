//! `envc lsp` in a scripted conversation, as an editor holds it: the real binary over its
//! stdin and stdout, a project on disk with an import and a standard library module, and
//! every feature asked for and answered. The editor's side of it (Neovim, headless) is
//! `tests/editor.rs`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

/// How long any one answer may take before the test gives up (not a performance bound:
/// a hung server must fail the test, not hang it).
const PATIENCE: Duration = Duration::from_secs(30);

struct Client {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    next_id: i64,
    /// Notifications that arrived while an answer was awaited.
    notifications: Vec<Value>,
}

impl Client {
    fn start(dir: &Path) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_envc"))
            .arg("lsp")
            .current_dir(dir)
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, messages) = channel();
        std::thread::spawn(move || loop {
            let mut length = None;
            loop {
                let mut line = String::new();
                if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(n) = line.strip_prefix("Content-Length: ") {
                    length = n.parse::<usize>().ok();
                }
            }
            let mut body = vec![0; length.expect("a Content-Length header")];
            stdout.read_exact(&mut body).unwrap();
            if tx.send(serde_json::from_slice(&body).unwrap()).is_err() {
                return;
            }
        });
        Client {
            child,
            stdin,
            messages,
            next_id: 0,
            notifications: Vec::new(),
        }
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// Sends a request and waits for its answer (its `result`, or its `error`).
    fn request(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        loop {
            let m = self.messages.recv_timeout(PATIENCE).expect("an answer");
            if m["id"] == json!(id) {
                return match m.get("error") {
                    Some(e) => Err(e.clone()),
                    None => Ok(m["result"].clone()),
                };
            }
            self.notifications.push(m);
        }
    }

    /// The next diagnostics published for `uri`.
    /// The first diagnostics published for `uri` that `wanted` accepts; those before are
    /// passed over (a publish the server made between two edits, when the test was slower
    /// than its debounce).
    fn diagnostics_when(&mut self, uri: &str, wanted: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = std::time::Instant::now() + PATIENCE;
        loop {
            let d = self.diagnostics(uri);
            if wanted(&d) || std::time::Instant::now() > deadline {
                return d;
            }
        }
    }

    fn diagnostics(&mut self, uri: &str) -> Vec<Value> {
        if let Some(i) = self.notifications.iter().position(|n| {
            n["method"] == "textDocument/publishDiagnostics" && n["params"]["uri"] == uri
        }) {
            let n = self.notifications.remove(i);
            return n["params"]["diagnostics"].as_array().unwrap().clone();
        }
        loop {
            let m = self.messages.recv_timeout(PATIENCE).expect("diagnostics");
            if m["method"] == "textDocument/publishDiagnostics" && m["params"]["uri"] == uri {
                return m["params"]["diagnostics"].as_array().unwrap().clone();
            }
            self.notifications.push(m);
        }
    }
}

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn at(uri: &str, line: u32, character: u32) -> Value {
    json!({ "textDocument": { "uri": uri }, "position": { "line": line, "character": character } })
}

/// Line and column of the first `needle` in `text`, for positions that follow the text.
fn find(text: &str, needle: &str) -> (u32, u32) {
    let i = text.find(needle).unwrap();
    let line = text[..i].matches('\n').count() as u32;
    let col = (i - text[..i].rfind('\n').map_or(0, |j| j + 1)) as u32;
    (line, col)
}

const LIB: &str = "# The port every web server listens on.\nlet port = 8080\n";

const MAIN: &str = r#"import "./lib.env"
import "std/debian"

let web = host(name = "web-1", address = "192.0.2.10")
let pkgs = debian.packages(web, { nginx = "1.22.1-9" })
let conf = file(path = "/etc/app.conf", content = "port=${lib.port}\n", target = web)
let count = 3
output total = count * 2
"#;

#[test]
fn a_scripted_editor_session() {
    let dir = tempfile::Builder::new()
        .prefix("envc-lsp-")
        .tempdir()
        .unwrap();
    let dir = dir.path().canonicalize().unwrap();
    std::fs::write(dir.join("lib.env"), LIB).unwrap();
    std::fs::write(dir.join("prod.env"), MAIN).unwrap();
    // The project's policy pack, which MAIN keeps until an edit below breaks it.
    std::fs::create_dir(dir.join("pack")).unwrap();
    std::fs::write(
        dir.join("pack/hosts.env"),
        "policy \"documentation-addresses\": for h in nodes(\"host\") => starts_with(h.address, \"192.0.2.\")\n",
    )
    .unwrap();
    std::fs::write(dir.join("envc.toml"), "[policy]\npacks = [\"pack\"]\n").unwrap();
    let main = uri(&dir.join("prod.env"));
    let lib = uri(&dir.join("lib.env"));

    let mut c = Client::start(&dir);
    let init = c
        .request(
            "initialize",
            json!({ "processId": null, "rootUri": uri(&dir), "capabilities": {} }),
        )
        .unwrap();
    let caps = &init["capabilities"];
    for cap in [
        "hoverProvider",
        "definitionProvider",
        "referencesProvider",
        "completionProvider",
        "documentFormattingProvider",
        "documentSymbolProvider",
        "renameProvider",
        "codeActionProvider",
    ] {
        assert!(!caps[cap].is_null(), "{cap} in {caps}");
    }
    c.notify("initialized", json!({}));

    // Open a correct file: it has no diagnostics.
    c.notify("textDocument/didOpen", json!({ "textDocument": { "uri": main, "languageId": "envc", "version": 1, "text": MAIN } }));
    assert_eq!(c.diagnostics(&main), Vec::<Value>::new());

    // Hover: a binding's type, value and documentation; an imported one's too.
    let (l, col) = find(MAIN, "count * 2");
    let hover = c
        .request("textDocument/hover", at(&main, l, col + 1))
        .unwrap();
    assert_eq!(
        hover["contents"]["value"],
        "```envc\nlet count: int\n```\n\n```envc\n= 3\n```"
    );
    assert_eq!(
        hover["range"],
        json!({ "start": { "line": l, "character": col }, "end": { "line": l, "character": col + 5 } })
    );
    let (l, col) = find(MAIN, "port}");
    let hover = c.request("textDocument/hover", at(&main, l, col)).unwrap();
    let text = hover["contents"]["value"].as_str().unwrap();
    assert!(
        text.contains("let port: int")
            && text.contains("The port every web server listens on.")
            && text.contains("from `lib.env`"),
        "{text}"
    );
    // On a node: its kind, target and derivation id.
    let (l, col) = find(MAIN, "file(");
    let hover = c
        .request("textDocument/hover", at(&main, l, col + 1))
        .unwrap();
    let text = hover["contents"]["value"].as_str().unwrap();
    assert!(
        text.contains("file `/etc/app.conf` on host `web-1`") && text.contains("derivation `"),
        "{text}"
    );

    // Definition: into the imported file, and into the standard library (a read-only copy).
    let (l, col) = find(MAIN, "port}");
    let def = c
        .request("textDocument/definition", at(&main, l, col))
        .unwrap();
    assert_eq!(
        def,
        json!({ "uri": lib, "range": { "start": { "line": 1, "character": 4 }, "end": { "line": 1, "character": 8 } } })
    );
    let (l, col) = find(MAIN, "packages(");
    let def = c
        .request("textDocument/definition", at(&main, l, col + 2))
        .unwrap();
    let std_file = def["uri"]
        .as_str()
        .unwrap()
        .strip_prefix("file://")
        .unwrap()
        .to_string();
    assert!(std_file.ends_with("/debian.env"), "{def}");
    let std_text = std::fs::read_to_string(&std_file).unwrap();
    let line = std_text
        .lines()
        .nth(def["range"]["start"]["line"].as_u64().unwrap() as usize)
        .unwrap();
    assert!(line.contains("fn packages("), "{line}");
    assert!(std::fs::metadata(&std_file)
        .unwrap()
        .permissions()
        .readonly());

    // References of `web`: its definition and its two uses.
    let (l, col) = find(MAIN, "web =");
    let refs = c
        .request("textDocument/references", json!({ "textDocument": { "uri": main }, "position": { "line": l, "character": col }, "context": { "includeDeclaration": true } }))
        .unwrap();
    assert_eq!(refs.as_array().unwrap().len(), 3, "{refs}");

    // Completion: a module's names after `lib.`, a node's outputs after `web.`.
    let (l, col) = find(MAIN, "lib.port");
    let items = c
        .request("textDocument/completion", at(&main, l, col + 4))
        .unwrap();
    assert!(
        items
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["label"] == "port"),
        "{items}"
    );

    // Symbols.
    let symbols = c
        .request(
            "textDocument/documentSymbol",
            json!({ "textDocument": { "uri": main } }),
        )
        .unwrap();
    let names: Vec<&str> = symbols
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["lib", "debian", "web", "pkgs", "conf", "count", "total"]
    );

    // An edit that breaks the file: the error arrives (debounced), at the typo, with the
    // checker's code and hint, and a quick fix that repairs it.
    let broken = MAIN.replace("let conf = file(", "let conf = fiel(");
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": main, "version": 2 }, "contentChanges": [{ "text": broken }] }));
    let diags = c.diagnostics(&main);
    assert_eq!(diags.len(), 1, "{diags:?}");
    let (l, col) = find(&broken, "fiel(");
    assert_eq!(diags[0]["code"], "name::unknown");
    assert_eq!(
        diags[0]["range"]["start"],
        json!({ "line": l, "character": col })
    );
    assert!(
        diags[0]["message"]
            .as_str()
            .unwrap()
            .contains("did you mean `file`?"),
        "{}",
        diags[0]
    );
    let actions = c
        .request("textDocument/codeAction", json!({ "textDocument": { "uri": main }, "range": diags[0]["range"], "context": { "diagnostics": diags } }))
        .unwrap();
    assert_eq!(actions[0]["title"], "Change `fiel` to `file`");
    assert_eq!(actions[0]["edit"]["changes"][&main][0]["newText"], "file");

    // An incremental edit that repairs it: the diagnostics clear.
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": main, "version": 3 }, "contentChanges": [{ "range": { "start": { "line": l, "character": col }, "end": { "line": l, "character": col + 4 } }, "text": "file" }] }));
    assert_eq!(c.diagnostics(&main), Vec::<Value>::new());

    // Editing the imported file shows the importer's new error: `lib.port` is gone.
    c.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": lib, "languageId": "envc", "version": 1, "text": LIB } }),
    );
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": lib, "version": 2 }, "contentChanges": [{ "text": "let prt = 8080\n" }] }));
    // Opening the library may publish main's (clean) diagnostics first.
    let diags = c.diagnostics_when(&main, |d| !d.is_empty());
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert!(
        diags[0]["message"].as_str().unwrap().contains("`port`"),
        "{}",
        diags[0]
    );
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": lib, "version": 3 }, "contentChanges": [{ "text": LIB }] }));
    assert_eq!(c.diagnostics(&main), Vec::<Value>::new());

    // Rename `count` everywhere; a rename to a taken name is refused with the reason.
    let (l, col) = find(MAIN, "count = 3");
    let edit = c
        .request("textDocument/rename", json!({ "textDocument": { "uri": main }, "position": { "line": l, "character": col }, "newName": "replicas" }))
        .unwrap();
    assert_eq!(
        edit["changes"][&main].as_array().unwrap().len(),
        2,
        "{edit}"
    );
    let refused = c
        .request("textDocument/rename", json!({ "textDocument": { "uri": main }, "position": { "line": l, "character": col }, "newName": "web" }))
        .unwrap_err();
    assert_eq!(
        refused["message"],
        "`web` is already defined where `count` is visible"
    );

    // Formatting: `envc fmt`'s output, as one edit; none for a formatted file.
    let messy = MAIN.replace("let count = 3", "let   count=3");
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": main, "version": 4 }, "contentChanges": [{ "text": messy }] }));
    let edits = c.request("textDocument/formatting", json!({ "textDocument": { "uri": main }, "options": { "tabSize": 2, "insertSpaces": true } })).unwrap();
    assert_eq!(edits[0]["newText"], MAIN);
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": main, "version": 5 }, "contentChanges": [{ "text": MAIN }] }));
    let none = c.request("textDocument/formatting", json!({ "textDocument": { "uri": main }, "options": { "tabSize": 2, "insertSpaces": true } })).unwrap();
    assert!(none.is_null(), "{none}");

    // A policy of the project's pack (envc.toml), broken by an edit: shown at the node that
    // breaks it, in the file being edited, with the policy as related information.
    let moved = MAIN.replace("192.0.2.10", "198.51.100.10");
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": main, "version": 6 }, "contentChanges": [{ "text": moved }] }));
    let diags = c.diagnostics_when(&main, |d| !d.is_empty());
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["code"], "policy::violation");
    let (l, _) = find(&moved, "host(");
    assert_eq!(diags[0]["range"]["start"]["line"], l, "{}", diags[0]);
    let related = &diags[0]["relatedInformation"][0];
    assert!(
        related["location"]["uri"]
            .as_str()
            .unwrap()
            .ends_with("pack/hosts.env"),
        "{related}"
    );
    c.notify("textDocument/didChange", json!({ "textDocument": { "uri": main, "version": 7 }, "contentChanges": [{ "text": MAIN }] }));
    assert_eq!(
        c.diagnostics_when(&main, |d| d.is_empty()),
        Vec::<Value>::new()
    );

    // A request about a file that is not open is an error, not a crash.
    let err = c
        .request("textDocument/hover", at(&uri(&dir.join("other.env")), 0, 0))
        .unwrap_err();
    assert!(
        err["message"].as_str().unwrap().contains("is not open"),
        "{err}"
    );

    c.request("shutdown", Value::Null).unwrap();
    c.notify("exit", Value::Null);
    let status = c.child.wait().unwrap();
    assert!(status.success(), "{status}");
}
