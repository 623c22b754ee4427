//! `envc render` end to end: Kubernetes objects written as canonical YAML with a
//! kustomization, a deferred value (a command's captured output on a real SSH host, from
//! tests/support/nshosts.rs) substituted from the environment's records, a re-render that
//! rewrites only what changed, an object that leaves the source removed, and a directory
//! envc did not render refused. `envc build` runs everything else and skips each object
//! without a `gitops` target, saying so (tests/gitops.rs delivers them).

use crate::support::{nshosts, offline, output, project};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nshosts::TestHosts;
use offline::envc;
use output::{node_outcomes, stderr, stdout, text};
use project::Project;

/// This process's umask (which `envc` inherits), as the kernel reports it.
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// An environment never built: a Service whose port is a VM's forwarded port (a number
/// in the schema), a ConfigMap that reads its address, and a Namespace that reads nothing.
const NEVER_BUILT: &str = r#"let i = image(name = "i")
let web = vm(name = "web", image = i)
let ns = manifest(api_version = "v1", kind = "Namespace", name = "shop")
let svc = manifest(
  api_version = "v1",
  kind = "Service",
  name = "web",
  namespace = "shop",
  body = { spec = { ports = [{ name = "ssh", port = web.port }] } },
)
let conf = manifest(
  api_version = "v1",
  kind = "ConfigMap",
  name = "web",
  namespace = "shop",
  body = { data = { upstream = "${web.address}:8080" } },
)
"#;

#[test]
fn a_preview_writes_every_object_before_the_first_build() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("prod.env"), NEVER_BUILT).unwrap();
    let out = d.path().join("k8s");

    // Without `--preview`: nothing written, and the way to a preview named.
    let refused = envc(d.path(), &["render", "prod.env", "--out", "k8s"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        stderr(&refused).contains("`manifest:shop/ConfigMap/web` uses an output of `vm:web`")
            && stderr(&refused).contains("`manifest:shop/Service/web` uses an output of `vm:web`")
            && stderr(&refused).contains("nothing was written")
            && stderr(&refused).contains("hint: `--preview`"),
        "{}",
        text(&refused)
    );
    assert!(!out.exists());

    let preview = envc(
        d.path(),
        &["render", "prod.env", "--out", "k8s", "--preview"],
    );
    assert_eq!(preview.status.code(), Some(7), "{}", text(&preview));
    let read = |rel: &str| std::fs::read_to_string(out.join(rel)).unwrap();
    // The object that reads nothing deferred is what a render after the build writes.
    assert_eq!(
        read("_cluster/namespace-shop.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n"
    );
    assert_eq!(
        read("shop/configmap-web.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\ndata:\n  upstream: \"<known after build: vm:web.address>:8080\"\n"
    );
    // A number in the schema is a string in the preview: readable, and refused by a
    // cluster should anyone apply it.
    assert!(
        read("shop/service-web.yaml")
            .contains("  - name: ssh\n    port: \"<known after build: vm:web.port>\"\n"),
        "{}",
        read("shop/service-web.yaml")
    );
    assert!(read("kustomization.yaml").ends_with(
        "resources:\n- _cluster/namespace-shop.yaml\n- shop/configmap-web.yaml\n- shop/service-web.yaml\n"
    ));
    let err = stderr(&preview);
    assert!(
        err.contains("render: 3 objects in k8s: 3 written, 0 removed\n")
            && err.contains(
                "render: preview: 2 of them hold values known only after a build, written as `<known after build: NODE.OUTPUT>`"
            )
            && err.contains("\n  shop/configmap-web.yaml: vm:web.address\n  shop/service-web.yaml: vm:web.port\n"),
        "{}",
        text(&preview)
    );

    // An environment whose objects read nothing deferred: a preview is a render, exit 0.
    std::fs::write(
        d.path().join("prod.env"),
        "let ns = manifest(api_version = \"v1\", kind = \"Namespace\", name = \"shop\")\n",
    )
    .unwrap();
    let known = envc(
        d.path(),
        &["render", "prod.env", "--out", "k8s", "--preview"],
    );
    assert_eq!(known.status.code(), Some(0), "{}", text(&known));
    assert_eq!(
        stdout(&known),
        "removed k8s/shop/configmap-web.yaml\nremoved k8s/shop/service-web.yaml\n",
        "{}",
        text(&known)
    );
    assert!(!stderr(&known).contains("preview"), "{}", text(&known));
}

fn source(addr: &str, replicas: u32, with_config: bool) -> String {
    let config = if with_config {
        r#"let conf = manifest(
  api_version = "v1",
  kind = "ConfigMap",
  name = "web",
  namespace = "shop",
  body = { data = { upstream = "${h.address}:8080", token = tok.stdout, "app.conf" = "listen 80;\nworkers 2;\n" } },
)
"#
    } else {
        ""
    };
    format!(
        r#"let h = host(name = "h", address = "{addr}")
let tok = exec(name = "token", target = h, shell = "echo tok-$((6 * 7))", capture = true)
let ns = manifest(api_version = "v1", kind = "Namespace", name = "shop")
{config}let web = manifest(
  api_version = "apps/v1",
  kind = "Deployment",
  name = "web",
  namespace = "shop",
  labels = {{ app = "web" }},
  body = {{ spec = {{
    replicas = {replicas},
    selector = {{ matchLabels = {{ app = "web" }} }},
    template = {{
      metadata = {{ labels = {{ app = "web" }} }},
      spec = {{ containers = [{{ name = "web", image = "nginx:1.27", resources = {{ limits = {{ memory = 256MiB }} }} }}] }},
    }},
  }} }},
)
"#
    )
}

#[test]
fn render_writes_canonical_objects_and_prunes_what_left() {
    let hosts = TestHosts::start(1);
    let addr = hosts.addr(0).to_string();
    let p = Project::new(&hosts, "envc-render-");
    let out = p.path("k8s");
    let out_arg = out.display().to_string();
    p.write(&source(&addr, 2, true));

    // Before the command ran, its output is not known: nothing is written.
    let early = p.run(&hosts, &["render", "--out", &out_arg]);
    assert_eq!(early.status.code(), Some(1), "{}", text(&early));
    assert!(
        stderr(&early).contains("`manifest:shop/ConfigMap/web` uses an output of `h/exec:token`, known once it is built")
            && stderr(&early).contains("nothing was written"),
        "{}",
        text(&early)
    );
    assert!(!out.exists());
    assert!(
        stderr(&early).contains("hint: `--preview` writes every object now"),
        "{}",
        text(&early)
    );

    // A preview writes every object now, the value not known yet as a placeholder, and
    // says which objects hold one, with an exit code of its own.
    let preview = p.run(&hosts, &["render", "--out", &out_arg, "--preview"]);
    assert_eq!(preview.status.code(), Some(7), "{}", text(&preview));
    assert!(
        stderr(&preview)
            .contains("render: preview: 1 of them hold values known only after a build")
            && stderr(&preview).contains("\n  shop/configmap-web.yaml: h/exec:token.stdout\n"),
        "{}",
        text(&preview)
    );
    let previewed = std::fs::read_to_string(out.join("shop/configmap-web.yaml")).unwrap();
    assert!(
        previewed.contains(&format!(
            "  token: \"<known after build: h/exec:token.stdout>\"\n  upstream: \"{addr}:8080\"\n"
        )),
        "{previewed}"
    );
    // Files are made as any program makes them: objects are not secrets.
    let mask = umask();
    for f in [
        "kustomization.yaml",
        "_cluster/namespace-shop.yaml",
        "shop/configmap-web.yaml",
        "shop/deployment-web.yaml",
    ] {
        assert_eq!(mode(&out.join(f)), 0o666 & !mask, "{f}");
    }
    assert_eq!(mode(&out.join("shop")), 0o777 & !mask);

    // A build runs the command, and skips each object: none has a repository to go to.
    let build = p.run(&hosts, &["build", "--json"]);
    assert_eq!(build.status.code(), Some(0), "{}", text(&build));
    let outcomes = node_outcomes(&build);
    assert_eq!(outcomes["h/exec:token"], "ok: ran: exit 0");
    assert_eq!(
        outcomes["manifest:shop/Deployment/web"],
        "skipped: not delivered: it has no `target` (a `gitops` repository); `envc render FILE --out DIR` writes it",
        "{outcomes:?}"
    );

    let first = p.run(&hosts, &["render", "--out", &out_arg]);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    // Only the object that held a placeholder changes: the preview was the rest's bytes.
    assert_eq!(
        stdout(&first),
        format!("wrote {out_arg}/shop/configmap-web.yaml\n"),
        "{}",
        text(&first)
    );
    assert!(!stderr(&first).contains("preview"), "{}", text(&first));
    assert!(
        stderr(&first).contains("render: 3 objects in"),
        "{}",
        text(&first)
    );
    let read = |rel: &str| std::fs::read_to_string(out.join(rel)).unwrap();
    // The kustomization records what envc wrote in each file, by hash.
    let wrote = |rel: &str| {
        format!(
            "# blake3: {} {rel}\n",
            blake3::hash(read(rel).as_bytes()).to_hex()
        )
    };
    assert_eq!(
        read("kustomization.yaml"),
        format!(
            "# Written by envc: objects listed here that leave the environment are removed.\n\
             # environment: prod\n{}{}{}\
             apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n\
             - _cluster/namespace-shop.yaml\n- shop/configmap-web.yaml\n- shop/deployment-web.yaml\n",
            wrote("_cluster/namespace-shop.yaml"),
            wrote("shop/configmap-web.yaml"),
            wrote("shop/deployment-web.yaml")
        )
    );
    assert_eq!(
        read("_cluster/namespace-shop.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: shop\n"
    );
    assert_eq!(
        read("shop/configmap-web.yaml"),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\n  namespace: shop\ndata:\n  app.conf: |\n    listen 80;\n    workers 2;\n  token: tok-42\n  upstream: \"{addr}:8080\"\n"
        )
    );
    assert!(
        read("shop/deployment-web.yaml").contains("  replicas: 2\n"),
        "{}",
        read("shop/deployment-web.yaml")
    );
    assert!(
        read("shop/deployment-web.yaml").contains("            memory: 256Mi\n"),
        "{}",
        read("shop/deployment-web.yaml")
    );

    // The same source renders the same bytes and writes nothing; one changed field
    // rewrites one file.
    let again = p.run(&hosts, &["render", "--out", &out_arg]);
    assert_eq!(stdout(&again), "", "{}", text(&again));
    p.write(&source(&addr, 3, true));
    let changed = p.run(&hosts, &["render", "--out", &out_arg]);
    assert_eq!(
        stdout(&changed),
        format!("wrote {out_arg}/shop/deployment-web.yaml\n"),
        "{}",
        text(&changed)
    );

    // An object that leaves the source leaves the directory; what envc did not write stays.
    std::fs::write(out.join("shop/notes.txt"), "mine\n").unwrap();
    p.write(&source(&addr, 3, false));
    let pruned = p.run(&hosts, &["render", "--out", &out_arg]);
    assert_eq!(pruned.status.code(), Some(0), "{}", text(&pruned));
    assert_eq!(
        stdout(&pruned),
        format!("removed {out_arg}/shop/configmap-web.yaml\n"),
        "{}",
        text(&pruned)
    );
    assert!(!out.join("shop/configmap-web.yaml").exists());
    assert!(out.join("shop/notes.txt").exists());
    assert!(!read("kustomization.yaml").contains("configmap"));

    // A directory with a kustomization of someone else's: nothing is written or removed.
    let foreign = p.path("theirs");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(
        foreign.join("kustomization.yaml"),
        "resources:\n- app.yaml\n",
    )
    .unwrap();
    std::fs::write(foreign.join("app.yaml"), "kind: ConfigMap\n").unwrap();
    let refused = p.run(&hosts, &["render", "--out", &foreign.display().to_string()]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        stderr(&refused).contains("kustomization.yaml was not written by envc"),
        "{}",
        text(&refused)
    );
    assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 2);

    // The attacks of issue 34 on `--out`: a namespace directory that is a link out of it,
    // and a kustomization carrying envc's header that lists a file through a link. Nothing
    // outside is written or removed; the render fails naming the link.
    let outside = p.path("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("victim.yaml"), "precious\n").unwrap();
    let forged = p.path("forged");
    std::fs::create_dir(&forged).unwrap();
    std::os::unix::fs::symlink(&outside, forged.join("link")).unwrap();
    std::os::unix::fs::symlink(&outside, forged.join("shop")).unwrap();
    std::fs::write(
        forged.join("kustomization.yaml"),
        "# Written by envc: objects listed here that leave the environment are removed.\n\
         # environment: prod\nresources:\n- link/victim.yaml\n",
    )
    .unwrap();
    let attacked = p.run(&hosts, &["render", "--out", &forged.display().to_string()]);
    assert_eq!(attacked.status.code(), Some(1), "{}", text(&attacked));
    assert!(
        stderr(&attacked).contains("is a symbolic link"),
        "{}",
        text(&attacked)
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("victim.yaml")).unwrap(),
        "precious\n"
    );
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 1);
}
