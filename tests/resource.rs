//! `resource` nodes end to end, through the CLI: a real provider written with PyPI's
//! tfprovider (`tests/providers/local.py`, from `scripts/tf-providers`'s filesystem mirror)
//! manages local files; each step checks the file on disk as well as what envc says.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::output::{stderr, stdout};

/// The filesystem mirror `scripts/tf-providers --dir` writes.
fn mirror() -> PathBuf {
    let out = std::process::Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tf-providers"),
    )
    .arg("--dir")
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

struct Project {
    dir: tempfile::TempDir,
    mirror: PathBuf,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        Project {
            dir,
            mirror: mirror(),
        }
    }

    fn out(&self, name: &str) -> PathBuf {
        self.dir.path().join("out").join(name)
    }

    /// The environment: one file, `name` holding `content`.
    fn write(&self, name: &str, content: &str) {
        let source = format!(
            r#"let motd = resource(
  name = "motd",
  provider = "registry.envc.test/envc-test/local",
  version = "~> 0.1.0",
  provider_config = {{ root = "{root}" }},
  resource_type = "local_file",
  body = {{ filename = "{file}", content = "{content}" }},
)
output motd_id = motd.id
"#,
            root = self.dir.path().join("out").display(),
            file = self.out(name).display(),
        );
        std::fs::write(self.dir.path().join("main.env"), source).unwrap();
    }

    fn envc_with_mirror(&self, mirror: &Path, args: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_envc"))
            .args(args)
            .current_dir(self.dir.path())
            .env("NO_COLOR", "1")
            .env("ENVC_PROVIDER_MIRROR", mirror)
            .env_remove("CI")
            .env_remove("ENVC_STORE")
            .env_remove("ENVC_STATE")
            .output()
            .unwrap()
    }

    fn envc(&self, args: &[&str]) -> Output {
        self.envc_with_mirror(&self.mirror, args)
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.envc(args);
        assert!(
            out.status.success(),
            "envc {args:?}:\n{}\n{}",
            stdout(&out),
            stderr(&out)
        );
        format!("{}{}", stdout(&out), stderr(&out))
    }
}

fn sha1_hex(text: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
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

#[test]
fn a_resource_is_locked_built_left_alone_changed_replaced_read_back_and_destroyed() {
    let p = Project::new();
    p.write("motd", "hello");

    // Unlocked, it does not run: a provider runs only at the bytes its lock pins.
    let out = p.envc(&["build", "main.env"]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(
        said.contains("provider `registry.envc.test/envc-test/local` is not locked"),
        "{said}"
    );

    let said = p.ok(&["lock", "main.env"]);
    assert!(said.contains("pins written"), "{said}");
    let lock = std::fs::read_to_string(p.dir.path().join("main.lock")).unwrap();
    assert!(
        lock.contains(
            "[[provider]]\nname = \"registry.envc.test/envc-test/local\"\nversion = \"0.1.0\""
        ),
        "{lock}"
    );
    assert!(lock.contains("\"h1:"), "{lock}");
    p.ok(&["lock", "--check", "main.env"]);

    let said = p.ok(&["build", "main.env"]);
    assert!(said.contains("create    resource:motd: ok"), "{said}");
    assert_eq!(std::fs::read_to_string(p.out("motd")).unwrap(), "hello");
    let outputs = p.ok(&["output", "main.env"]);
    assert!(
        outputs.contains(&format!("motd_id = \"{}\"", sha1_hex("hello"))),
        "{outputs}"
    );

    // A no-op starts no provider: it succeeds with the mirror gone and the store's copy
    // of the provider removed.
    std::fs::remove_dir_all(p.dir.path().join(".envc/providers")).unwrap();
    let out = p.envc_with_mirror(Path::new("/nonexistent"), &["build", "main.env"]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{said}");
    assert!(said.contains("build: 0 ran, 1 cached"), "{said}");

    // A new content is a change in place.
    p.write("motd", "bye");
    let plan = p.ok(&["plan", "main.env"]);
    assert!(plan.contains("update    resource:motd"), "{plan}");
    let said = p.ok(&["build", "main.env"]);
    assert!(said.contains("ok: updated in place"), "{said}");
    assert_eq!(std::fs::read_to_string(p.out("motd")).unwrap(), "bye");

    // Drift: an edit by hand is found, the sensitive content named but never shown.
    std::fs::write(p.out("motd"), "edited by hand").unwrap();
    let out = p.envc(&["drift", "main.env"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        said.contains("drift     resource:motd: content was (sensitive), found (sensitive)"),
        "{said}"
    );
    assert!(!said.contains("edited by hand"), "{said}");
    assert!(!said.contains("bye"), "{said}");

    // A new file name replaces it: the old file goes, the new one comes.
    p.write("motd2", "bye");
    let said = p.ok(&["build", "main.env"]);
    assert!(said.contains("ok: replaced"), "{said}");
    assert!(!p.out("motd").exists());
    assert_eq!(std::fs::read_to_string(p.out("motd2")).unwrap(), "bye");

    // Destroy: by its provider, from the record.
    let said = p.ok(&["destroy", "--yes", "main.env"]);
    assert!(
        said.contains("delete    resource:motd: ok: destroyed by its provider"),
        "{said}"
    );
    assert!(!p.out("motd2").exists());
}

#[test]
fn an_attribute_the_provider_does_not_have_is_refused_with_the_closest_name() {
    let p = Project::new();
    p.write("motd", "hello");
    p.ok(&["lock", "main.env"]);
    let source = std::fs::read_to_string(p.dir.path().join("main.env")).unwrap();
    std::fs::write(
        p.dir.path().join("main.env"),
        source.replace("content =", "contents ="),
    )
    .unwrap();
    let out = p.envc(&["build", "main.env"]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(4), "{said}");
    assert!(
        said.contains("resource type `local_file` has no attribute `contents`"),
        "{said}"
    );
    assert!(said.contains("did you mean `content`?"), "{said}");
    assert!(!p.out("motd").exists());
}

#[test]
fn a_secret_argument_reaches_the_provider_and_nothing_envc_keeps_or_says() {
    const SECRET: &str = "s3cr3t-w0rds";
    let p = Project::new();
    p.write("motd", "placeholder");
    let source = std::fs::read_to_string(p.dir.path().join("main.env")).unwrap();
    std::fs::write(
        p.dir.path().join("main.env"),
        source.replace(
            "content = \"placeholder\"",
            "content = secret(\"motd_text\")",
        ),
    )
    .unwrap();
    std::fs::write(
        p.dir.path().join("envc.toml"),
        "[secrets.from]\nmotd_text = { env = \"ENVC_TEST_MOTD\" }\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_envc"))
            .args(args)
            .current_dir(p.dir.path())
            .env("NO_COLOR", "1")
            .env("ENVC_PROVIDER_MIRROR", &p.mirror)
            .env("ENVC_TEST_MOTD", SECRET)
            .env_remove("CI")
            .env_remove("ENVC_STORE")
            .env_remove("ENVC_STATE")
            .output()
            .unwrap();
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(out.status.success(), "envc {args:?}: {said}");
        assert!(
            !said.contains(SECRET),
            "envc {args:?} said the secret: {said}"
        );
    };
    run(&["lock", "main.env"]);
    run(&["plan", "main.env"]);
    run(&["build", "main.env"]);
    assert_eq!(std::fs::read_to_string(p.out("motd")).unwrap(), SECRET);
    // Nothing under the store holds it: not the record, not the run's log.
    let mut stack = vec![p.dir.path().join(".envc")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
                assert!(!found, "{} holds the secret", path.display());
            }
        }
    }
    run(&["drift", "main.env"]);
    run(&["destroy", "--yes", "main.env"]);
    assert!(!p.out("motd").exists());
}
