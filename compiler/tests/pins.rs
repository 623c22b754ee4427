//! Lockfile pins are inputs of the derivations that use them: moving one pin changes the
//! ids of exactly the nodes that use it and of what depends on them, and nothing else.

#![allow(clippy::unwrap_used)] // a test that cannot go on fails by panicking

use std::collections::{BTreeMap, BTreeSet};

use envc_compiler::{compile, CompileOptions, MemoryLoader};

const SOURCE: &str = r#"
import "std/aws"
let base = image(name = "base", packages = ["curl"])
let vm0 = vm(name = "v", image = base)
let h = host(name = "h", address = "10.0.0.1")
let hello = package(name = "hello", target = h)
let curl = package(name = "curl", target = h)
let motd = file(path = "/etc/motd", content = "hi\n", target = h, after = [hello])
let alone = file(path = "/etc/alone", content = "x\n", target = h)
let on_vm = file(path = "/etc/on-vm", content = "x\n", target = vm0)
let net = aws.network("web", region = "eu-west-1")
let web = aws.machine("web-0", network = net)
let on_web = file(path = "/etc/on-web", content = "x\n", target = web)
"#;

/// Node key (`kind:name` or `target/kind:name`) → id, compiled with `pins`.
fn ids(pins: &[(&str, &str)]) -> BTreeMap<String, String> {
    let options = CompileOptions {
        pins: pins
            .iter()
            .map(|(k, v)| (k.parse().expect("a pin key"), v.to_string()))
            .collect(),
        ..CompileOptions::default()
    };
    let c = compile(
        "main.env",
        &MemoryLoader::new([("main.env", SOURCE)]),
        &options,
    );
    assert!(c.diagnostics.is_empty(), "{:#?}", c.diagnostics);
    c.graph
        .unwrap()
        .nodes()
        .map(|n| {
            let key = match &n.target {
                Some(t) => format!("{}/{}:{}", t.name, n.kind.name(), n.name),
                None => format!("{}:{}", n.kind.name(), n.name),
            };
            (key, n.id.hex())
        })
        .collect()
}

/// Moving from pins `before` to `after` changes the ids of exactly `changed`.
fn check(before: &[(&str, &str)], after: &[(&str, &str)], changed: &[&str]) {
    let (a, b) = (ids(before), ids(after));
    let moved: BTreeSet<&str> = a
        .iter()
        .filter(|(k, id)| b.get(*k) != Some(id))
        .map(|(k, _)| k.as_str())
        .collect();
    let expected: BTreeSet<&str> = changed.iter().copied().collect();
    assert_eq!(moved, expected, "{before:?} → {after:?}");
}

#[test]
fn a_moved_pin_changes_exactly_its_users_and_their_dependents() {
    let hello_a = ("package:hello", "2.10-3 amd64 aaaa");
    let hello_b = ("package:hello", "2.10-3+b1 amd64 bbbb");
    let image_a = ("image:base", "debian/bookworm curl=7.88.1-10+deb12u12@aaaa");
    let image_b = ("image:base", "debian/bookworm curl=7.88.1-10+deb12u14@bbbb");
    // The same version, rebuilt by the archive: other bytes.
    let image_c = ("image:base", "debian/bookworm curl=7.88.1-10+deb12u12@cccc");
    // No pins at all, then one: the package and what is ordered after it.
    check(&[], &[hello_a], &["h/package:hello", "h/file:/etc/motd"]);
    // A package moves: the same two.
    check(
        &[hello_a, image_a],
        &[hello_b, image_a],
        &["h/package:hello", "h/file:/etc/motd"],
    );
    // The image's package set moves: the image, the VM booted from it, what is on it.
    check(
        &[hello_a, image_a],
        &[hello_a, image_b],
        &["image:base", "vm:v", "v/file:/etc/on-vm"],
    );
    // Only the bytes of one of its packages move: the same.
    check(
        &[hello_a, image_a],
        &[hello_a, image_c],
        &["image:base", "vm:v", "v/file:/etc/on-vm"],
    );
    // The images' clock moves: the same.
    check(
        &[image_a, ("source_date_epoch", "1700000000")],
        &[image_a, ("source_date_epoch", "1700086400")],
        &["image:base", "vm:v", "v/file:/etc/on-vm"],
    );
    // mmdebstrap, tar or mke2fs, which write the image's bytes, moves: the same three. ssh
    // and QEMU only carry bytes or run what was built: no node is made with them.
    for (tool, from, to) in [
        ("tool:mmdebstrap", "1.3.5", "1.5.7"),
        ("tool:tar", "1.34", "1.35"),
        ("tool:mke2fs", "1.47.0", "1.47.2"),
    ] {
        check(
            &[image_a, (tool, from)],
            &[image_a, (tool, to)],
            &["image:base", "vm:v", "v/file:/etc/on-vm"],
        );
    }
    check(
        &[("tool:ssh", "9.2p1 Debian-2+deb12u6")],
        &[("tool:ssh", "9.2p1 Debian-2+deb12u10")],
        &[],
    );
    check(
        &[("tool:qemu-system-x86_64", "1:7.2+dfsg-7+deb12u16")],
        &[("tool:qemu-system-x86_64", "1:7.2+dfsg-7+deb12u18+b3")],
        &[],
    );
    // A pin no node uses changes nothing.
    check(&[], &[("package:nginx", "1.22.1-9 amd64 cccc")], &[]);
    // A cloud machine's image moves: the machine, what is on it.
    let october = ("cloud_image:debian-12@eu-west-1", "ami-0d2c5a1f3e4b61001");
    let november = ("cloud_image:debian-12@eu-west-1", "ami-0d2c5a1f3e4b61101");
    check(
        &[october],
        &[november],
        &["vm:web-0", "web-0/file:/etc/on-web"],
    );
    // The same image in another region is another pin.
    check(
        &[october],
        &[
            october,
            ("cloud_image:debian-12@us-east-1", "ami-0d2c5a1f3e4b61101"),
        ],
        &[],
    );
}
