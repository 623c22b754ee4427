//! Models shared by the unit tests of several modules.

use crate::model::*;

pub fn hex(c: char) -> String {
    c.to_string().repeat(64)
}

/// A small but complete lockfile: one of every kind of pin.
pub fn sample() -> Lockfile {
    Lockfile {
        version: FORMAT_VERSION,
        source_date_epoch: 1_700_000_000,
        stdlib: hex('5'),
        archives: vec![ArchivePin {
            name: "debian/bookworm".into(),
            mirror: "http://deb.debian.org/debian".into(),
            suite: "bookworm".into(),
            architecture: "amd64".into(),
            components: vec!["main".into()],
            release_sha256: hex('a'),
            date: "Sat, 10 Jan 2026 10:14:31 UTC".into(),
        }],
        packages: vec![
            PackagePin {
                name: "hello".into(),
                archive: "debian/bookworm".into(),
                version: "2.10-3".into(),
                architecture: "amd64".into(),
                filename: "pool/main/h/hello/hello_2.10-3_amd64.deb".into(),
                size: 56_120,
                sha256: hex('b'),
                closure: Some(PackageClosure {
                    starts_from: vec!["image:debian-12".into(), REQUIRED.into()],
                    packages: vec!["libgreet1".into()],
                }),
            },
            PackagePin {
                name: "libc6".into(),
                archive: "debian/bookworm".into(),
                version: "2.36-9+deb12u13".into(),
                architecture: "amd64".into(),
                filename: "pool/main/g/glibc/libc6_2.36-9+deb12u13_amd64.deb".into(),
                size: 2_757_936,
                sha256: hex('c'),
                closure: Some(PackageClosure {
                    starts_from: vec![REQUIRED.into()],
                    packages: Vec::new(),
                }),
            },
            PackagePin {
                name: "libgreet1".into(),
                archive: "debian/bookworm".into(),
                version: "1.0-1".into(),
                architecture: "amd64".into(),
                filename: "pool/main/g/greet/libgreet1_1.0-1_amd64.deb".into(),
                size: 20_480,
                sha256: hex('d'),
                closure: None,
            },
        ],
        images: vec![ImagePin {
            name: "debian-12".into(),
            archive: "debian/bookworm".into(),
            includes: vec!["apt".into(), "libc6".into()],
            packages: vec![
                ("apt".into(), "2.6.1".into()),
                ("base-files".into(), "12.4+deb12u12".into()),
                ("libc6".into(), "2.36-9+deb12u13".into()),
                ("openssh-server".into(), "1:9.2p1-2+deb12u6".into()),
            ],
        }],
        tools: vec![
            ToolPin {
                name: "mmdebstrap".into(),
                version: "1.3.5".into(),
            },
            ToolPin {
                name: "qemu-system-x86_64".into(),
                version: "1:7.2+dfsg-7+deb12u18+b3".into(),
            },
            ToolPin {
                name: "ssh".into(),
                version: "9.2p1 Debian-2+deb12u6".into(),
            },
        ],
    }
}
