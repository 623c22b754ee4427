//! Every kind of error, rendered as the CLI renders it, kept as insta snapshots that hold the
//! source and the message together. `every_code_has_a_snapshot` fails when a new error code
//! appears in the compiler without a case here.

use std::collections::BTreeSet;

use envc::render::Renderer;
use envc_compiler::{compile, CompileOptions, Limits, MemoryLoader};

struct Case {
    name: &'static str,
    files: Vec<(String, Vec<u8>)>,
    set: Vec<(&'static str, &'static str)>,
    select: Option<&'static str>,
    max_steps: Option<u64>,
    /// Hosts `envc verify`'s lab stands a fresh VM in for.
    vm_stand_ins: Vec<&'static str>,
}

fn case(name: &'static str, main: &str) -> Case {
    Case {
        name,
        files: vec![("main.env".into(), main.as_bytes().to_vec())],
        set: vec![],
        select: None,
        max_steps: None,
        vm_stand_ins: vec![],
    }
}

impl Case {
    fn file(mut self, path: &str, text: &str) -> Case {
        self.files.push((path.into(), text.as_bytes().to_vec()));
        self
    }
    fn set(mut self, k: &'static str, v: &'static str) -> Case {
        self.set.push((k, v));
        self
    }
    fn vm_stand_in(mut self, host: &'static str) -> Case {
        self.vm_stand_ins.push(host);
        self
    }
}

const HOST: &str = "let h = host(name = \"h1\", address = \"192.0.2.1\")\n";

/// Four web hosts, `webs`, for the rollout cases.
const WEBS: &str =
    "let webs = [for i in 0..4 => host(name = \"web-${i}\", address = \"192.0.2.${10 + i}\")]\n";

fn webs(rest: &str) -> String {
    format!("{WEBS}{rest}")
}

/// A rollout's `batch` and `max_failures` wrong in each other way (the codes are in
/// `cases`).
fn rollout_cases() -> Vec<Case> {
    vec![
        case(
            "rollout-batch-zero-percent",
            &webs("rollout \"web\": webs, batch = \"0%\"\n"),
        ),
        case(
            "rollout-batch-over-100-percent",
            &webs("rollout \"web\": webs, batch = \"150%\"\n"),
        ),
        case(
            "rollout-batch-not-a-number",
            &webs("rollout \"web\": webs, batch = \"2\"\n"),
        ),
        case(
            "rollout-batch-wrong-type",
            &webs("rollout \"web\": webs, batch = 2GiB\n"),
        ),
        case(
            "rollout-max-failures-over-100-percent",
            &webs("rollout \"web\": webs, max_failures = \"101%\"\n"),
        ),
        case("rollout-not-a-list", &webs("rollout \"web\": webs[0]\n")),
    ]
}

fn cases() -> Vec<Case> {
    let h = |rest: &str| format!("{HOST}{rest}");
    let mut deep_imports = case("load-too-deep", "import \"./m0.env\"\n");
    for i in 0..70 {
        deep_imports = deep_imports.file(
            &format!("m{i}.env"),
            &format!("import \"./m{}.env\"\n", i + 1),
        );
    }
    let mut too_large = case("load-too-large", "import \"./big.env\"\n");
    too_large.files.push((
        "big.env".into(),
        vec![b'#'; envc_compiler::program::MAX_SOURCE_BYTES + 1],
    ));
    let mut not_utf8 = case("load-not-utf8", "let a = 1\n");
    not_utf8.files[0].1 = b"let a = \"caf\xe9\"\n".to_vec();
    let forward_chain: String = (0..=envc_compiler::check::MAX_BINDING_DEPTH)
        .map(|i| format!("let a{i} = a{}\n", i + 1))
        .collect::<String>()
        + &format!("let a{} = 1\n", envc_compiler::check::MAX_BINDING_DEPTH + 1);
    let mut too_long = case("eval-too-long", "let xs = [for i in 0..100000 => i * 2]\n");
    too_long.max_steps = Some(10_000);
    let mut no_such = case(
        "graph-no-such-node",
        &h("let f = file(path = \"/etc/motd\", content = \"hi\", target = h)\n"),
    );
    no_such.select = Some("file:/etc/mtod");
    let mut ambiguous = case(
        "graph-ambiguous-node",
        "let a = host(name = \"a\", address = \"192.0.2.1\")\nlet b = host(name = \"b\", address = \"192.0.2.2\")\n\
         let fs = [for t in [a, b] => file(path = \"/etc/motd\", content = \"hi\", target = t)]\n",
    );
    ambiguous.select = Some("file:/etc/motd");
    vec![
        // lexing
        case("lex-bad-escape", "let s = \"tab\\q\"\n"),
        case("lex-bad-number", "let m = 12px\n"),
        case("lex-bad-octal", "let m = 0o789\n"),
        case("lex-unexpected-character", "let a = true\nlet b = false\nlet ok = a && b\n"),
        case("lex-unterminated-string", "let s = \"no end\nlet t = 1\n"),
        // parsing
        case("parse-chained-comparison", "let ok = 1 < 2 < 3\n"),
        case("parse-duplicate-field", "let r = { port = 1, port = 2 }\n"),
        case("parse-expected-item", "replicas = 3\n"),
        case("parse-if-without-else", "let x = if true { 1 }\n"),
        case("parse-interpolated-path", "import \"./${name}.env\"\n"),
        case("parse-keyword-as-name", "let for = 1\n"),
        case("parse-missing-comma", "let r = {\n  a = 1\n  b = 2\n}\n"),
        case("parse-number-too-large", "let n = 99999999999999999999\n"),
        case("parse-positional-after-named", "let x = join(separator = \",\", [\"a\"])\n"),
        case("parse-too-deep", &format!("let x = {}1{}\n", "[".repeat(200), "]".repeat(200))),
        case("parse-unexpected-token", "let x = (1 + )\nlet y = [1 2]\n"),
        // loading
        case("load-bad-import-path", "import \"lib.env\"\n").file("lib.env", "let a = 1\n"),
        case("load-duplicate-alias", "import \"std/debian\"\nimport \"./debian.env\"\n").file("debian.env", "let a = 1\n"),
        case("load-import-cycle", "import \"./a.env\"\n")
            .file("a.env", "import \"./b.env\"\n")
            .file("b.env", "import \"./a.env\"\n"),
        case("load-outside-project", "import \"../shared.env\"\n"),
        deep_imports,
        case("load-unknown-std-module", "import \"std/debain\"\n"),
        case("load-unreadable", "import \"./missing.env\"\n"),
        case("load-stack", "let core = stack(\"core.env\")\nlet web = file(path = \"/etc/web.conf\", content = \"db=${core.db}\\n\", target = host(name = \"h1\", address = \"192.0.2.1\"))\n")
            .file("core.env", "output db = \"10.0.0.5\"\noutput port = 5432 +\n"),
        case("load-bad-stack-path", "let core = stack(\"../platform/core.env\")\n"),
        not_utf8,
        too_large,
        // names
        case("name-duplicate", "let port = 1\nlet port = 2\n"),
        case("name-too-deep", &forward_chain),
        case("name-output-outside-root", "import \"./lib.env\"\n").file("lib.env", "output x = 1\n"),
        case("name-param-outside-root", "import \"./lib.env\"\n").file("lib.env", "param n: int = 1\n"),
        case("name-unknown", "let hosts = [1]\nlet n = len(hots)\n"),
        case("name-unknown-module", "let p: net.Port = 1\n"),
        case("name-unknown-type", "type Port = int(1..=65535)\nlet p: Prot = 1\n"),
        case("param-unknown", "param replicas: int = 3\n").set("replica", "5"),
        case("param-not-a-string", "param tags: str = \"a\"\n").set("tags", "[1]"),
        case("param-not-a-value", "param replicas: int(1..=7) = 3\n").set("replicas", "three"),
        // The value typed may be the password itself: the error must not show it.
        case("param-secret-value", "param db_password: secret\n").set("db_password", "hunter2"),
        // types
        case("type-argument-twice", "fn f(a: int) -> int { a }\nlet x = f(1, a = 2)\n"),
        case("type-bad-operands", "let x = 1 + \"a\"\n"),
        // A rule over the whole graph: a VM made directly cannot bypass it.
        case("policy-violation", "import \"./web.env\"\nlet small = web.server(\"web-0\")\nlet rogue = vm(name = \"rogue\", image = image(name = \"i\"), memory = 16GiB)\npolicy \"vm-owner\": for n in nodes(\"vm\") => contains(n.tags, \"owner\") and n.memory <= 4GiB,\n  \"${n.name} needs an owner and at most 4GiB\"\n")
            .file("web.env", "default tags = { owner = \"web\" }\nfn server(name: str) => vm(name = name, image = image(name = \"i\"), memory = 8GiB)\n"),
        case("eval-vm-without-image", "let v = vm(name = \"web-0\")\n"),
        case("eval-vm-image-and-cloud", "import \"std/debian\"\nlet v = vm(\n  name = \"web-0\",\n  image = debian.default_image,\n  cloud = {\n    provider = \"aws\",\n    region = \"eu-west-1\",\n    instance_type = \"t3.micro\",\n    public_address = true,\n    image = { name = \"d\", owner = \"1\", pattern = \"d-*\", architecture = \"x86_64\", suite = \"bookworm\" },\n    network = { name = \"n\", cidr = \"10.0.0.0/16\", subnet = \"\", security_groups = [], ssh_from = [] },\n  },\n)\n"),
        case("eval-missing-tag", "import \"std/debian\"\nlet a = debian.machine(\"web-0\", tags = { owner = \"web\" })\nlet b = debian.machine(\"db-0\", tags = { ownr = \"data\" })\npolicy \"owned\": for n in nodes(\"vm\") => n.tags.owner != \"\"\n"),
        case("moved-bad-key", "let img = image(name = \"i\")\nlet web = vm(name = \"web-a\", image = img)\nmoved \"web-0\" -> \"web-a\"\n"),
        case("moved-same-key", "let img = image(name = \"i\")\nlet web = vm(name = \"web-a\", image = img)\nmoved \"vm:web-a\" -> \"vm:web-a\"\n"),
        case("moved-kind-change", "let web = host(name = \"web-a\", address = \"192.0.2.1\")\nmoved \"vm:web-0\" -> \"host:web-a\"\n"),
        case("moved-identity", &h("let conf = file(path = \"/etc/nginx/site.conf\", content = \"hi\", target = h)\nmoved \"h1/file:/etc/nginx/default.conf\" -> \"h1/file:/etc/nginx/site.conf\"\n")),
        case("moved-duplicate", "let img = image(name = \"i\")\nlet a = vm(name = \"web-a\", image = img)\nlet b = vm(name = \"web-b\", image = img)\nmoved \"vm:web-0\" -> \"vm:web-a\"\nmoved \"vm:web-0\" -> \"vm:web-b\"\n"),
        case("moved-source-exists", "let img = image(name = \"i\")\nlet a = vm(name = \"web-0\", image = img)\nlet b = vm(name = \"web-a\", image = img)\nmoved \"vm:web-0\" -> \"vm:web-a\"\n"),
        // A chain: which key the state has depends on whether `web-b` was built.
        case("moved-chain", "let img = image(name = \"i\")\nlet web = vm(name = \"web-c\", image = img)\nmoved \"vm:web-0\" -> \"vm:web-b\"\nmoved \"vm:web-b\" -> \"vm:web-c\"\n"),
        case("moved-target-missing", "let img = image(name = \"i\")\nlet web = vm(name = \"web-a\", image = img)\nmoved \"vm:web-0\" -> \"vm:web-b\"\n"),
        case("moved-other-target", "let a = host(name = \"a\", address = \"192.0.2.1\")\nlet b = host(name = \"b\", address = \"192.0.2.2\")\nlet f = file(path = \"/etc/motd\", content = \"hi\", target = b)\nlet g = file(path = \"/etc/issue\", content = \"hi\", target = a)\nmoved \"a/file:/etc/motd\" -> \"b/file:/etc/motd\"\n"),
        case("parse-policy-level", "policy \"vm-size\" mandatroy: for v in nodes(\"vm\") => v.memory <= 4GiB\n"),
        case("type-nodes-placement", "let vms = nodes(\"vm\")\npolicy \"few\": for v in vms => true\n"),
        case("type-unknown-kind", "policy \"owner\": for v in nodes(\"vms\") => contains(v.tags, \"owner\")\n"),
        case("graph-tag-conflict", "import \"./lib.env\"\ndefault tags = { owner = \"ops\" }\nlet h = host(name = \"h\", address = \"192.0.2.1\")\nlet a = package(name = \"curl\", target = h)\nlet b = lib.curl(h)\n")
            .file("lib.env", "default tags = { owner = \"web\" }\nfn curl(h: host) => package(name = \"curl\", target = h)\n"),
        case("graph-cross-network", "let db = vm(name = \"db-0\", image = image(name = \"i\"))\nlet web = host(name = \"web-0\", address = \"192.0.2.10\")\nlet conf = file(path = \"/etc/app.conf\", content = \"db = ${db.address}:5432\\n\", target = web)\n"),
        case("type-stack-output", "let core = stack(\"core.env\")\nlet h = host(name = \"h2\", address = core.db.address)\n")
            .file("core.env", "let db = host(name = \"db\", address = \"192.0.2.5\")\noutput db = db\n"),
        case("type-stack-placement", "fn db_of(file: str) -> str => stack(file).address\n"),
        case("type-bad-range", "type Name = str(1..=2)\n"),
        case("type-bound-not-literal", "let max = 9\ntype Small = int(1..=max)\n"),
        case("type-branch-mismatch", "param prod: bool = true\nlet x = if prod { 1 } else { \"one\" }\n"),
        case("type-deferred", "let v = vm(name = \"db-0\", image = image(name = \"i\"))\nlet big = if v.address == \"10.0.0.1\" { 2 } else { 1 }\n"),
        case("type-empty-range", "type Port = int(65535..=1)\n"),
        case("type-mismatch", &h("let f = file(path = \"/etc/motd\", content = \"hi\", mode = 644, target = h)\n")),
        case("type-missing-argument", "let v = vm(cpus = 2)\n"),
        case("type-missing-field", "type Db = { name: str, port: int = 5432 }\nlet d: Db = { port = 1 }\n"),
        case("type-mixed-list", "let xs = [1, \"two\"]\n"),
        case("type-no-fields", "let n = 1\nlet x = n.value\n"),
        case("type-not-callable", "let n = 1\nlet x = n(2)\n"),
        case("type-not-generic", "let x: int[str] = 1\n"),
        case("type-not-indexable", "let n = 1\nlet x = n[0]\n"),
        case("type-not-interpolable", "let xs = [1, 2]\nlet s = \"all: ${xs}\"\n"),
        case("type-not-iterable", "let xs = [for x in 5 => x]\n"),
        case("type-recursive", "type Tree = { children: list[Tree] }\n"),
        case("type-too-many-arguments", "let n = len([1], [2])\n"),
        case("type-unknown-argument", &h("let f = file(path = \"/etc/motd\", content = \"hi\", mod = 0o644, target = h)\n")),
        case("type-unknown-field", "type Db = { name: str, port: int = 5432 }\nlet d: Db = { name = \"x\", prot = 1 }\n"),
        // evaluation
        case("eval-assertion", "param replicas: int = 4\nassert replicas % 2 == 1, \"replicas must be odd\"\n"),
        case("eval-bad-node-name", &h("let p = package(name = \"curl; rm -rf /\", target = h)\n")),
        case("eval-cycle", &h("let web = service(name = \"web\", target = h, after = [db])\nlet db = service(name = \"db\", target = h, after = [web])\n")),
        case("eval-division-by-zero", "param n: int = 0\nlet per = 100 / n\n"),
        case("eval-duplicate-key", "let r = {for i in [1, 2, 1] => \"k${i}\" = i}\n"),
        case("eval-empty-separator", "let parts = split(\"a,b\", \"\")\n"),
        case("eval-file-content", &h("let f = file(path = \"/etc/motd\", target = h)\n")),
        case("eval-index-out-of-range", "let xs = [1, 2]\nlet x = xs[5]\n"),
        case("eval-missing-key", "let ports = { web = 80 }\nlet p = ports[\"wbe\"]\n"),
        case("eval-missing-param", "param region: str\n"),
        case("eval-not-storable", &h("let f = file(path = \"/etc/x\", template = path(\"x.j2\"), vars = { f = fn(x) => x }, target = h)\n")).file("x.j2", "{{ f }}\n"),
        case("eval-out-of-range", "let v = vm(name = \"big\", image = image(name = \"i\"), cpus = 128)\n"),
        case("eval-overflow", "let n = 9223372036854775807\nlet m = n + 1\n"),
        case("eval-path-outside-project", &h("let f = file(path = \"/etc/x\", source = path(\"../secret\"), target = h)\n")),
        case("eval-set-not-literal", "param replicas: int = 3\n").set("replicas", "1 + 2"),
        case("eval-base-uses-nodes", "let v = vm(name = \"v\", image = image(name = \"i\"))\nlet h = host(name = \"h1\", address = \"192.0.2.1\", base = image(name = \"b\", after = [v]))\n"),
        // `envc verify`'s lab, for a host that declares no base.
        case("eval-no-base", &h("let f = file(path = \"/etc/motd\", content = \"hi\", target = h)\n")).vm_stand_in("h1"),
        case("eval-suite-not-base", "import \"std/debian\"\nlet h = host(name = \"h1\", address = \"192.0.2.1\", suite = \"trixie\", base = debian.default_image)\n"),
        case("eval-exec-command", &h("let init = exec(name = \"init\", target = h, argv = [\"pg_ctl\", \"promote\"], shell = \"pg_ctl promote\")\n")),
        case("eval-exec-env", &h("let init = exec(name = \"init\", target = h, argv = [\"env\"], env = { \"PG-DATA\" = \"/srv\" })\n")),
        case("eval-exec-path", &h("let init = exec(name = \"init\", target = h, argv = [\"pg_basebackup\"], creates = \"standby.signal\")\n")),
        case("eval-empty-list", "let biggest = max([])\n"),
        {
            let mut c = case("eval-not-text", "let logo = read(path(\"logo.png\"))\n");
            c.files.push(("logo.png".into(), vec![0x89, b'P', b'N', b'G']));
            c
        },
        case("eval-gitops", &h("let fleet = gitops(name = \"fleet\", target = h, repo = \"/srv/fleet.git\", path = \"../clusters/prod\")\n")),
        case("eval-not-captured", &h("let token = exec(name = \"token\", target = h, argv = [\"kubeadm\", \"token\", \"create\"])\nlet f = file(path = \"/etc/join\", content = token.stdout, target = h)\n")),
        case("eval-manifest-schema", "let web = manifest(\n  api_version = \"apps/v1\",\n  kind = \"Deployment\",\n  name = \"web\",\n  body = { spec = {\n    replica = 2,\n    selector = { matchLabels = { app = \"web\" } },\n    template = { spec = { containers = [{ name = \"web\", image = 1 }] } },\n  } },\n)\n"),
        case("eval-bad-secret-name", &h("let f = file(path = \"/etc/pw\", content = secret(\"db password\"), target = h)\n")),
        case("eval-exposed-secret", &h("let init = exec(name = \"init\", target = h, argv = [\"mysql\", \"--password=${secret(\"db\")}\"])\n")),
        case("eval-too-deep", "fn down(n: int) -> int { down(n + 1) }\nlet x = down(0)\n"),
        case("eval-too-large", "let xs = 0..100000000\n"),
        too_long,
        case("eval-unreadable-file", &h("let f = file(path = \"/etc/x\", source = path(\"missing.conf\"), target = h)\n")),
        case("eval-unset-attribute", &h("let p = package(name = \"curl\", target = h)\nlet v = \"${p.version}\"\n")),
        // rollouts
        case("parse-rollout-option", &webs("rollout \"web\": webs, batch = 2, max_failure = 1\n")),
        // tests
        case("parse-test-field", "test \"t\" {\n  envv = \"./prod.env\"\n  expect true\n}\n"),
        case("parse-test-line", "test \"t\" {\n  len(xs) == 1\n}\n"),
        case("rollout-batch", &webs("rollout \"web\": webs, batch = 0\n")),
        case("rollout-max-failures", &webs("rollout \"web\": webs, batch = 2, max_failures = -1\n")),
        case("rollout-not-a-machine", &webs("let confs = [for w in webs => file(path = \"/etc/web.conf\", content = \"x\", target = w)]\nrollout \"web\": [webs[0], confs[1]]\n")),
        case("rollout-machine-twice", &webs("let db = host(name = \"db\", address = \"192.0.2.20\")\nrollout \"web\": webs\nrollout \"canary\": [db, webs[0]], max_failures = 0\n")),
        case("rollout-duplicate", &webs("let db = host(name = \"db\", address = \"192.0.2.20\")\nrollout \"web\": webs, batch = 2\nrollout \"web\": [db]\n")),
        // graph
        case(
            "graph-conflict",
            &h("let a = file(path = \"/etc/motd\", content = \"one\", target = h)\nlet b = file(path = \"/etc/motd\", content = \"two\", target = h)\n"),
        ),
        case(
            "graph-check-conflict",
            &h("let a = package(name = \"nginx\", target = h, expect = [tcp(80)])\nlet b = package(name = \"nginx\", target = h, expect = [tcp(8080)])\n"),
        ),
        no_such,
        ambiguous,
        // A warning: the pods may come from elsewhere.
        case(
            "graph-service-selects-nothing",
            "let web = manifest(\n  api_version = \"apps/v1\",\n  kind = \"Deployment\",\n  name = \"web\",\n  namespace = \"shop\",\n  body = { spec = {\n    selector = { matchLabels = { app = \"web\" } },\n    template = {\n      metadata = { labels = { app = \"web\" } },\n      spec = { containers = [{ name = \"web\", image = \"nginx:1.27\" }] },\n    },\n  } },\n)\nlet svc = manifest(\n  api_version = \"v1\",\n  kind = \"Service\",\n  name = \"web\",\n  namespace = \"shop\",\n  body = { spec = { selector = { app = \"wbe\" }, ports = [{ port = 80 }] } },\n)\n",
        ),
        // `adopt` lines: checked against the graph.
        case("adopt-unknown-node", "let h = host(name = \"web-0\", address = \"192.0.2.10\")\nlet motd = file(path = \"/etc/motd\", content = \"hi\\n\", target = h)\nadopt \"web-0/file:/etc/mtod\"\n"),
        case("adopt-not-adoptable", "let i = image(name = \"i\")\nadopt \"image:i\"\n"),
        case("adopt-from-not-allowed", "let h = host(name = \"web-0\", address = \"192.0.2.10\")\nlet motd = file(path = \"/etc/motd\", content = \"hi\\n\", target = h)\nadopt \"web-0/file:/etc/motd\" from { disk = \"/tmp/x\" }\n"),
        case("adopt-missing-from", "let legacy = vm(name = \"legacy\", image = image(name = \"i\"))\nadopt \"vm:legacy\"\n"),
        case("adopt-unknown-field", "let legacy = vm(name = \"legacy\", image = image(name = \"i\"))\nadopt \"vm:legacy\" from { disk = \"/var/lib/vms/legacy.qcow2\", prot = 2222 }\n"),
        case("adopt-missing-field", "let legacy = vm(name = \"legacy\", image = image(name = \"i\"))\nadopt \"vm:legacy\" from { disk = \"/var/lib/vms/legacy.qcow2\" }\n"),
        case("adopt-field-type", "let legacy = vm(name = \"legacy\", image = image(name = \"i\"))\nadopt \"vm:legacy\" from { disk = \"/var/lib/vms/legacy.qcow2\", port = \"2222\" }\n"),
        case("adopt-from-not-a-record", "let legacy = vm(name = \"legacy\", image = image(name = \"i\"))\nadopt \"vm:legacy\" from \"/var/lib/vms/legacy.qcow2\"\n"),
        case("adopt-duplicate", "let h = host(name = \"web-0\", address = \"192.0.2.10\")\nlet motd = file(path = \"/etc/motd\", content = \"hi\\n\", target = h)\nadopt \"web-0/file:/etc/motd\"\nadopt \"web-0/file:/etc/motd\"\n"),
        case("name-adopt-outside-root", "import \"./lib.env\"\nlet m = lib.motd\n")
            .file("lib.env", "let h = host(name = \"web-0\", address = \"192.0.2.10\")\nlet motd = file(path = \"/etc/motd\", content = \"hi\\n\", target = h)\nadopt \"web-0/file:/etc/motd\"\n"),
    ]
}

/// Mistakes in checks (`expect`, `require`): their codes are the general ones, so these
/// are kept apart from `cases` (whose names are codes).
fn check_cases() -> Vec<Case> {
    let h = |rest: &str| format!("{HOST}{rest}");
    vec![
        case("checks-not-a-check", &h("let p = package(name = \"nginx\", target = h, expect = [\"http://localhost/\"])\n")),
        case("checks-argument-type", &h("let p = package(name = \"nginx\", target = h, expect = [http(url = 80)])\n")),
        case("checks-port-out-of-range", &h("let p = package(name = \"nginx\", target = h, expect = [tcp(70000)])\n")),
        case("checks-unknown-kind", &h("let p = package(name = \"nginx\", target = h, expect = [htp(\"http://localhost/\")])\n")),
        case("checks-not-on-a-vm", "let v = vm(name = \"web-0\", image = image(name = \"i\"), expect = [tcp(22)])\n"),
        case("checks-not-in-attributes", "let m = manifest(name = \"cfg\", api_version = \"v1\", kind = \"ConfigMap\", body = { probe = tcp(80) })\n"),
        case("checks-missing-argument", &h("let p = package(name = \"nginx\", target = h, require = [free_space(\"/\")])\n")),
    ]
}

/// Diagnostics whose point is where they point or what they suggest (issue 18's
/// mistakes), not a code of their own.
fn hint_cases() -> Vec<Case> {
    vec![
        // Made in `std/`: each label at the user's call, the differing attribute named.
        case(
            "hint-graph-conflict-std",
            "import \"std/debian\"\nlet a = debian.machine(\"db-0\", memory = 2GiB)\nlet b = debian.machine(\"db-0\", memory = 4GiB, cpus = 2)\n",
        ),
        // Values that do not parse: what the type takes, not the parser's words.
        case("hint-param-not-an-int", "param members: int(1..=7) = 3\n").set("members", "3.5"),
        case("hint-param-not-a-size", "param memory: size\n").set("memory", "2gb"),
        case("hint-type-mismatch-quoted-size", "import \"std/debian\"\nlet db = debian.machine(\"db-0\", memory = \"2GiB\")\n"),
        case("hint-type-mismatch-command-string", &format!("{HOST}let e = exec(name = \"join\", target = h, argv = [\"cluster\", \"join\"], unless = \"test -e /etc/cluster/joined\")\n")),
        case("hint-builtin-alias", "let hosts = [\"a\", \"b\"]\nlet n = lenght(hosts)\n"),
        case("hint-std-module-import", "let motd = files.text(\"/etc/motd\", \"hi\")\n"),
        case("hint-unknown-field-at-key", "type Tags = { owner: str }\nlet t: Tags = {\n  owner = \"ops\",\n  cost_center = \"42\",\n}\n"),
        case("hint-set-not-a-value", "param replicas: int = 3\n").set("replicas", "three"),
        // `type` names a field here, and the one mistake is one error.
        // An output the referenced environment does not declare, at the field.
        case("hint-stack-unknown-output", "let core = stack(\"core.env\")\nlet url = \"pg://${core.adress}:${core.port}\"\n")
            .file("core.env", "output address = \"10.0.0.5\"\noutput port = 5432\n"),
        // Each failing instance, each with the calls that reached it.
        case("hint-assert-call-chain", "import \"./lib.env\"\nlet sizes = { a = 4GiB, b = 16GiB, c = 32GiB }\nlet dbs = [for k, v in sizes => lib.web(k, v)]\n")
            .file("lib.env", "fn db(name: str, memory: size) -> str {\n  assert memory <= 8GiB, \"database `${name}` asks for ${memory}, over 8GiB\"\n  name\n}\n\nfn web(name: str, memory: size) -> str => db(\"${name}-db\", memory)\n"),
        case("hint-assert-every-instance", "fn replica(i: int) -> int {\n  assert i < 2, \"at most two replicas\"\n  i\n}\nlet rs = [for i in [0, 1, 2, 3] => replica(i)]\n"),
        // A mistake that fails inside `std/` is shown at the user's call too.
        case("hint-std-user-call", "import \"std/debian\"\nlet db = debian.machine(\"DB_0\")\n"),
        case("hint-policy-advisory", "default tags = { owner = \"ops\" }\nlet a = vm(name = \"a\", image = image(name = \"i\"))\nlet b = vm(name = \"b\", image = image(name = \"i\"), cpus = 2)\npolicy \"two-cpus\" advisory: for v in nodes(\"vm\") => v.cpus >= 2\n"),
        // Each field passes the schema; the API server refuses them together.
        case("hint-selector-mismatch", "let web = manifest(\n  api_version = \"apps/v1\",\n  kind = \"Deployment\",\n  name = \"web\",\n  body = { spec = {\n    selector = { matchLabels = { app = \"web\" } },\n    template = {\n      metadata = { labels = { app = \"api\" } },\n      spec = { containers = [{ name = \"web\", image = \"nginx:1.27\" }] },\n    },\n  } },\n)\n"),
        case("hint-parse-one-error", "let unit = {\n  type = \"oneshot\",\n  restart = ,\n  user = \"app\",\n}\n"),
    ]
}

#[test]
fn check_diagnostics_render() {
    for c in check_cases() {
        let (rendered, codes) = run(&c);
        assert!(!codes.is_empty(), "case {} produced no diagnostic", c.name);
        insta::assert_snapshot!(
            c.name,
            format!("{}\n== rendered ==\n{rendered}", source_of(&c))
        );
    }
}

/// A template `envc check` finds wrong, as it renders it: the call in the `.env` file and
/// the place in the template (`envc_executor::check_templates`).
#[test]
fn template_diagnostics_render() {
    let main = "let h = host(name = \"h1\", address = \"192.0.2.1\")\nlet conf = file(\n  path = \"/etc/app.conf\",\n  template = path(\"app.conf.j2\"),\n  vars = { prot = 8080, name = \"web\" },\n  target = h,\n)\n";
    for (name, template) in [
        (
            "template-undefined",
            "# {{ name }}\nname = \"{{ name }}\"\nlisten = {{ port }}\n",
        ),
        (
            "template-syntax",
            "name = \"{{ name }}\"\n{% if prot %}\nlisten = {{ prot }\n{% endif %}\n",
        ),
    ] {
        let c = case(name, main).file("app.conf.j2", template);
        let loader = MemoryLoader {
            files: c.files.iter().cloned().collect(),
            ..MemoryLoader::default()
        };
        let mut compiled = compile("main.env", &loader, &CompileOptions::default());
        assert!(
            compiled.diagnostics.is_empty(),
            "{:?}",
            compiled.diagnostics
        );
        let graph = compiled.graph.take().unwrap();
        let found = envc_executor::check_templates(&graph, &mut compiled.sources, &loader);
        assert_eq!(found.len(), 1, "{name}: {found:?}");
        let rendered = Renderer::new(&compiled.sources, "", false, 100).render_all(&found);
        insta::assert_snapshot!(
            name,
            format!("{}\n== rendered ==\n{rendered}", source_of(&c))
        );
    }
}

/// `envc test`'s own diagnostics (`test::*`), one test each, as `envc test` renders them
/// (each comparison's sides after it); every `test::` code of the compiler has a case.
#[test]
fn test_diagnostics_render() {
    use envc_compiler::testing::{self, RenderFailure, TestRequest, TestWorld};
    struct World;
    impl TestWorld for World {
        fn render(
            &self,
            path: &str,
            text: &str,
            vars: &serde_json::Value,
        ) -> Result<String, RenderFailure> {
            envc_executor::render_template(path, text, vars)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .map_err(|e| RenderFailure(e.to_string()))
        }
        fn snapshot(&self, name: &str) -> Option<String> {
            (name == "app.conf").then(|| "at 10.0.0.9\n".to_string())
        }
    }
    let env = "param n: int = 1\nlet h = host(name = \"h1\", address = \"192.0.2.1\")\nlet dbs = [for i in 0..n => vm(name = \"db-${i}\", image = image(name = \"debian-12\", packages = []))]\nlet conf = file(path = \"/etc/app.conf\", content = \"at ${dbs[0].address}\\n\", target = h)\noutput first = dbs[0].address\n";
    let mock = "  mocks = { \"vm:db-0\" = { address = \"10.0.0.5\" } }\n";
    let cases = [
        ("test-expect-failed", format!("{mock}  expect outputs.first == \"10.0.0.6\"\n")),
        ("test-no-node", "  mocks = { \"vm:db-9\" = { address = \"10.0.0.5\" } }\n  expect true\n".to_string()),
        ("test-mock-unread", "  mocks = { \"vm:db-0\" = { address = \"10.0.0.5\", host_key = \"k\" } }\n  expect true\n".to_string()),
        ("test-mocks", "  mocks = { \"vm:db-0\" = { address = 1 + 1 } }\n  expect true\n".to_string()),
        ("test-field", "  set = [1]\n  expect true\n".to_string()),
        ("test-not-compiled", "  set = { n = 0 }\n  expect true\n".to_string()),
        ("test-no-expect", mock.to_string()),
        ("test-not-a-bool", "  expect len(nodes(\"vm\"))\n".to_string()),
        ("test-snapshot", "  expect len(nodes()) == snapshot(\"app.conf\")\n".to_string()),
        ("test-snapshot-differs", format!("{mock}  expect files[\"h1/file:/etc/app.conf\"] == snapshot(\"app.conf\")\n")),
        ("test-snapshot-missing", format!("{mock}  expect files[\"h1/file:/etc/app.conf\"] == snapshot(\"new.conf\")\n")),
        ("test-render", "  expect true\n".to_string()),
    ];
    let page = "let h = host(name = \"h1\", address = \"192.0.2.1\")\nlet page = file(path = \"/etc/page\", template = path(\"page.j2\"), vars = {}, target = h)\n";
    let mut produced = BTreeSet::new();
    for (name, body) in cases {
        let root = if name == "test-render" {
            "page.env"
        } else {
            "main.env"
        };
        let text = format!("test \"{name}\" {{\n  env = \"./{root}\"\n{body}}}\n");
        let loader = MemoryLoader {
            files: [
                ("main.env".to_string(), env.as_bytes().to_vec()),
                ("page.env".to_string(), page.as_bytes().to_vec()),
                ("page.j2".to_string(), b"{{ missing }}\n".to_vec()),
            ]
            .into_iter()
            .collect(),
            ..MemoryLoader::default()
        };
        let world = World;
        let run = testing::run(&TestRequest {
            file_name: "main_test.env".into(),
            text: &text,
            index: 0,
            root,
            loader: &loader,
            pins: Default::default(),
            packs: Vec::new(),
            world: &world,
            update: false,
        });
        let renderer = Renderer::new(&run.sources, "", false, 100);
        let mut rendered = String::new();
        for f in &run.failures {
            produced.insert(f.diagnostic.code.to_string());
            rendered.push_str(&renderer.render(&f.diagnostic));
            if let Some(c) = &f.compared {
                rendered.push_str(&format!("left: {}\nright: {}\n", c.left, c.right));
            }
        }
        assert!(
            produced.contains(&name.replacen('-', "::", 1)),
            "case {name} should produce {}, produced {:?}",
            name.replacen('-', "::", 1),
            run.failures
                .iter()
                .map(|f| f.diagnostic.code)
                .collect::<Vec<_>>()
        );
        insta::assert_snapshot!(name, format!("{text}\n== rendered ==\n{rendered}"));
    }
    // Every `test::` code the compiler has, but the two no test file reaches.
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/compiler/src/testing.rs"
    ))
    .unwrap();
    for (i, _) in source.match_indices("\"test::") {
        let code: String = source[i + 1..].chars().take_while(|c| *c != '"').collect();
        if ["test::internal", "test::unevaluated"].contains(&code.as_str()) {
            continue;
        }
        assert!(produced.contains(&code), "no case produces {code}");
    }
}

/// Compiles a case and renders what the CLI would print; the codes it produced.
fn run(c: &Case) -> (String, BTreeSet<String>) {
    let loader = MemoryLoader {
        files: c.files.iter().cloned().collect(),
        ..MemoryLoader::default()
    };
    let mut options = CompileOptions {
        params: c
            .set
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        stand_ins: c
            .vm_stand_ins
            .iter()
            .map(|h| (h.to_string(), envc_compiler::StandIn::Vm))
            .collect(),
        ..Default::default()
    };
    if let Some(n) = c.max_steps {
        options.limits = Limits {
            max_steps: n,
            ..Limits::default()
        };
    }
    let compiled = compile("main.env", &loader, &options);
    let mut diagnostics = compiled.diagnostics.clone();
    if let (Some(sel), Some(g)) = (c.select, &compiled.graph) {
        if let Err(d) = g.select(sel) {
            diagnostics.push(d);
        }
    }
    let renderer = Renderer::new(&compiled.sources, "", false, 100);
    // Warnings after errors, as the CLI prints them.
    (
        renderer.render_all(&diagnostics) + &renderer.render_warnings(&compiled.warnings),
        (diagnostics.iter().chain(&compiled.warnings))
            .map(|d| d.code.to_string())
            .collect(),
    )
}

fn with_big_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .expect("thread")
        .join()
        .expect("no panic")
}

fn source_of(c: &Case) -> String {
    let mut s = String::new();
    for (path, bytes) in c.files.iter().take(4) {
        let text = String::from_utf8_lossy(bytes);
        // Long lines and long files are cut: the snapshot shows the shape, not the bulk.
        let cut = |l: &str| match l.char_indices().nth(100) {
            Some((i, _)) => format!("{}… ({} bytes)", &l[..i], l.len()),
            None => l.to_string(),
        };
        let text: String = text
            .split_inclusive('\n')
            .map(|l| cut(l.trim_end_matches('\n')) + if l.ends_with('\n') { "\n" } else { "" })
            .collect();
        let lines: Vec<&str> = text.lines().collect();
        if lines.len() > 12 {
            let head = lines[..6].join("\n");
            s.push_str(&format!(
                "-- {path}\n{head}\n… {} more lines\n",
                lines.len() - 6
            ));
        } else {
            s.push_str(&format!("-- {path}\n{text}"));
        }
    }
    if c.files.len() > 4 {
        s.push_str(&format!("-- … {} more files\n", c.files.len() - 4));
    }
    for (k, v) in &c.set {
        s.push_str(&format!("-- --set {k}={v}\n"));
    }
    if let Some(sel) = c.select {
        s.push_str(&format!("-- envc show main.env {sel}\n"));
    }
    for h in &c.vm_stand_ins {
        s.push_str(&format!(
            "-- in verify's lab, a fresh VM standing in for {h}\n"
        ));
    }
    s
}

#[test]
fn diagnostics_render() {
    with_big_stack(|| {
        for c in cases()
            .into_iter()
            .chain(hint_cases())
            .chain(rollout_cases())
        {
            let (rendered, codes) = run(&c);
            assert!(!codes.is_empty(), "case {} produced no diagnostic", c.name);
            insta::assert_snapshot!(
                c.name,
                format!("{}\n== rendered ==\n{rendered}", source_of(&c))
            );
        }
    });
}

/// Every code the sources can produce is exercised by a case above (the case's name is the
/// code with `::` written `-`), except the graph cycle, which immutable values cannot form,
/// and `eval::internal`, the safety net for a failure that was not reported.
#[test]
fn every_code_has_a_snapshot() {
    let unreachable = ["graph::cycle", "eval::internal"];
    let root = env!("CARGO_MANIFEST_DIR");
    let mut in_sources = BTreeSet::new();
    for dir in ["lang/src", "compiler/src"] {
        for entry in std::fs::read_dir(format!("{root}/{dir}")).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for (i, _) in text.match_indices("::") {
                let start = text[..i].rfind('"').map(|s| s + 1);
                let end = text[i..].find('"').map(|e| i + e);
                if let (Some(s), Some(e)) = (start, end) {
                    let code = &text[s..e];
                    let (area, rest) = code.split_once("::").unwrap();
                    let areas = [
                        "lex", "parse", "load", "name", "type", "eval", "graph", "param", "policy",
                        "moved", "rollout", "adopt",
                    ];
                    if areas.contains(&area)
                        && !rest.is_empty()
                        && rest
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    {
                        in_sources.insert(code.to_string());
                    }
                }
            }
        }
    }
    let produced: BTreeSet<String> = with_big_stack(|| {
        let mut all = BTreeSet::new();
        for c in cases() {
            let (_, codes) = run(&c);
            assert!(
                codes.contains(&c.name.replacen('-', "::", 1)),
                "case {} should produce {}, produced {codes:?}",
                c.name,
                c.name.replacen('-', "::", 1)
            );
            all.extend(codes);
        }
        all
    });
    let missing: Vec<&String> = in_sources
        .iter()
        .filter(|c| !produced.contains(*c) && !unreachable.contains(&c.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "error codes without a snapshot case: {missing:?}"
    );
}

/// `--only` / `--exclude` patterns that cannot be used (`select::*`), as `plan` and
/// `build` render them: the closest key when one is close, else where the keys are listed.
#[test]
fn selection_diagnostics_render() {
    let src = "let h = host(name = \"web-0\", address = \"192.0.2.1\")\nlet f = file(path = \"/etc/nginx/nginx.conf\", content = \"x\", target = h)\n";
    let recorded: BTreeSet<String> = ["web-0/file:/etc/motd".to_string()].into();
    for (name, only, exclude) in [
        (
            "select-no-match",
            vec!["web-0/file:/etc/nginx/nginx.cnf"],
            vec![],
        ),
        (
            "select-no-match-record",
            vec![],
            vec!["web-0/file:/etc/mtod"],
        ),
        ("select-no-match-glob", vec!["db-*/service:*"], vec![]),
    ] {
        let compiled = compile(
            "main.env",
            &MemoryLoader::new([("main.env", src)]),
            &CompileOptions::default(),
        );
        let spec =
            envc_executor::Spec::from_graph(compiled.graph.as_ref().unwrap(), &compiled.sources);
        let strings = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let e = envc_executor::select_nodes(&spec, &recorded, &strings(&only), &strings(&exclude))
            .unwrap_err();
        let rendered = Renderer::new(&compiled.sources, "", false, 100)
            .render_all(&[envc::selection_diagnostic(&e)]);
        let flags: Vec<String> = (only.iter().map(|p| format!("--only '{p}'")))
            .chain(exclude.iter().map(|p| format!("--exclude '{p}'")))
            .collect();
        insta::assert_snapshot!(
            name,
            format!(
                "-- main.env\n{src}-- recorded, no longer in the source: web-0/file:/etc/motd\n-- envc build main.env {}\n\n== rendered ==\n{rendered}",
                flags.join(" ")
            )
        );
    }
}
