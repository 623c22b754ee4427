//! `envc lsp` in a real editor: Debian's Neovim (installed by scripts/setup), headless,
//! attaches the server to a broken file with its own LSP client, as docs/editors.md sets it
//! up, and reads back what it shows: the diagnostics, a hover, a definition in another
//! file, completions, and the buffer after formatting and after the quick fix.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LIB: &str = "# The port every web server listens on.\nlet port = 8080\n";

/// A typo (`hots`), badly formatted (`let   count=3`).
const MAIN: &str = r#"import "./lib.env"
let web = hots(name = "web-1", address = "192.0.2.10")
let   count=3
output url = "http://web-1:${lib.port}/"
"#;

/// Neovim 0.7's API (Debian bookworm): `start_client` + `buf_attach_client`, `*_sync`
/// requests. Every answer goes to the output file, one line each, for the test to read.
const SCRIPT: &str = r#"
local out = {}
local function say(s) table.insert(out, (tostring(s):gsub("\n", "\\n"))) end
local function finish() vim.fn.writefile(out, os.getenv("OUT")); vim.cmd("qall!") end
local ok, err = pcall(function()
  vim.cmd("edit " .. os.getenv("PROJECT") .. "/prod.env")
  local client = vim.lsp.start_client({
    name = "envc",
    cmd = { os.getenv("ENVC"), "lsp" },
    root_dir = os.getenv("PROJECT"),
  })
  assert(client, "the client started")
  vim.lsp.buf_attach_client(0, client)
  assert(vim.wait(20000, function() return #vim.diagnostic.get(0) > 0 end, 20), "diagnostics arrived")
  for _, d in ipairs(vim.diagnostic.get(0)) do
    local code = d.code or (d.user_data and d.user_data.lsp and d.user_data.lsp.code) or ""
    say(string.format("diagnostic %d:%d %s %s", d.lnum + 1, d.col + 1, code, d.message))
  end
  local function at(line, col)
    return { textDocument = vim.lsp.util.make_text_document_params(), position = { line = line, character = col } }
  end
  local function ask(method, params)
    local answers = vim.lsp.buf_request_sync(0, method, params, 10000)
    assert(answers and answers[client], method .. " answered")
    assert(not answers[client].err, method .. ": " .. vim.inspect(answers[client].err))
    return answers[client].result
  end
  -- Hover on `port` in `lib.port`, and its definition in lib.env.
  local line = 3
  local col = vim.fn.getline(line + 1):find("port") - 1
  say("hover " .. ask("textDocument/hover", at(line, col)).contents.value)
  local def = ask("textDocument/definition", at(line, col))
  say("definition " .. vim.fn.fnamemodify(vim.uri_to_fname(def.uri), ":t") .. ":" .. (def.range.start.line + 1))
  -- Completion after `lib.`.
  local items = ask("textDocument/completion", at(line, col))
  local labels = {}
  for _, i in ipairs(items.items or items) do table.insert(labels, i.label) end
  table.sort(labels)
  say("completion " .. table.concat(labels, ","))
  -- The quick fix for the typo, applied as the editor applies it.
  local diag = vim.lsp.diagnostic.get_line_diagnostics(0, 1)
  local actions = ask("textDocument/codeAction", {
    textDocument = vim.lsp.util.make_text_document_params(),
    range = { start = { line = 1, character = 10 }, ["end"] = { line = 1, character = 14 } },
    context = { diagnostics = diag },
  })
  say("action " .. actions[1].title)
  vim.lsp.util.apply_workspace_edit(actions[1].edit, "utf-16")
  -- Formatting, as :lua vim.lsp.buf.formatting_sync() does it.
  vim.lsp.buf.formatting_sync(nil, 10000)
  for _, l in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do say("buffer " .. l) end
  -- The fixed buffer's diagnostics clear.
  assert(vim.wait(20000, function() return #vim.diagnostic.get(0) == 0 end, 20), "diagnostics cleared")
  say("clean")
end)
if not ok then say("error " .. tostring(err)) end
finish()
"#;

#[test]
fn neovim_shows_what_envc_lsp_says() {
    let dir = tempfile::Builder::new()
        .prefix("envc-nvim-")
        .tempdir()
        .unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let project = dir.join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("lib.env"), LIB).unwrap();
    std::fs::write(project.join("prod.env"), MAIN).unwrap();
    std::fs::write(dir.join("test.lua"), SCRIPT).unwrap();
    let said = nvim(&dir, &[("PROJECT", project.display().to_string())]);
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        [
            "diagnostic 2:11 name::unknown unknown name `hots`: not defined\\nhelp: did you mean `host`?",
            "hover ```envc\\nlet port: int\\n```\\n\\nThe port every web server listens on.\\n\\nfrom `lib.env`",
            "definition lib.env:2",
            "completion port",
            "action Change `hots` to `host`",
            "buffer import \"./lib.env\"",
            "buffer let web = host(name = \"web-1\", address = \"192.0.2.10\")",
            "buffer let count = 3",
            "buffer output url = \"http://web-1:${lib.port}/\"",
            "clean",
        ],
        "{said}"
    );
}

/// Each example opened in Neovim: the server publishes for it (no diagnostics: they
/// compile), and a hover on its first `let` answers with the binding's type.
const EXAMPLES_SCRIPT: &str = r#"
local out = {}
local function say(s) table.insert(out, (tostring(s):gsub("\n", "\\n"))) end
local published = {}
local default = vim.lsp.handlers["textDocument/publishDiagnostics"]
vim.lsp.handlers["textDocument/publishDiagnostics"] = function(err, result, ctx, config)
  published[vim.uri_to_fname(result.uri)] = #result.diagnostics
  return default(err, result, ctx, config)
end
local ok, err = pcall(function()
  for _, file in ipairs(vim.split(os.getenv("FILES"), ",")) do
    vim.cmd("edit " .. file)
    local client = vim.lsp.start_client({ name = "envc", cmd = { os.getenv("ENVC"), "lsp" }, root_dir = vim.fn.fnamemodify(file, ":h") })
    vim.lsp.buf_attach_client(0, client)
    assert(vim.wait(30000, function() return published[file] ~= nil end, 20), "diagnostics for " .. file)
    local line, col
    for i, l in ipairs(vim.api.nvim_buf_get_lines(0, 0, -1, false)) do
      if l:match("^let ") then line, col = i - 1, 4; break end
    end
    local answers = vim.lsp.buf_request_sync(0, "textDocument/hover", { textDocument = vim.lsp.util.make_text_document_params(), position = { line = line, character = col } }, 10000)
    local value = answers and answers[client] and answers[client].result and answers[client].result.contents.value or "none"
    say(vim.fn.fnamemodify(file, ":t:r") .. " " .. published[file] .. " " .. value:match("^```envc\n(let [%w_]+)"))
    vim.lsp.stop_client(client)
  end
end)
if not ok then say("error " .. tostring(err)) end
vim.fn.writefile(out, os.getenv("OUT"))
vim.cmd("qall!")
"#;

#[test]
fn neovim_on_the_examples() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let files = [
        "quickstart.env",
        "component/prod.env",
        "postgres/prod.env",
        "replset/prod.env",
        "k8s/prod.env",
    ]
    .map(|f| root.join(f).display().to_string());
    let dir = tempfile::Builder::new()
        .prefix("envc-nvim-")
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("test.lua"), EXAMPLES_SCRIPT).unwrap();
    let said = nvim(dir.path(), &[("FILES", files.join(","))]);
    let firsts: Vec<String> = files
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            let name = text.lines().find_map(|l| l.strip_prefix("let ")).unwrap();
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let stem = Path::new(f)
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            format!("{stem} 0 let {name}")
        })
        .collect();
    assert_eq!(said.lines().collect::<Vec<_>>(), firsts, "{said}");
}

/// Runs `dir/test.lua` in a headless Neovim with `vars` in its environment, and returns
/// what it wrote to `$OUT`.
fn nvim(dir: &Path, vars: &[(&str, String)]) -> String {
    let out = dir.join("out.txt");
    let home = dir.join("home");
    let mut child = Command::new("nvim")
        .args(["--headless", "-u", "NONE", "-i", "NONE", "-n", "-c"])
        .arg(format!("luafile {}", dir.join("test.lua").display()))
        .env("ENVC", env!("CARGO_BIN_EXE_envc"))
        .envs(vars.iter().map(|(k, v)| (k, v)))
        .env("OUT", &out)
        // Neovim's own files (its LSP log) and envc's copy of the standard library.
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("nvim runs (scripts/setup installs Debian's neovim)");
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("nvim did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::read_to_string(&out).unwrap_or_else(|e| {
        let o = child.wait_with_output().unwrap();
        panic!(
            "no output from nvim ({e}): {}",
            String::from_utf8_lossy(&o.stderr)
        )
    })
}
