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
            signed_by: None,
            with: Vec::new(),
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
                image_deb(
                    "apt",
                    "2.6.1",
                    "amd64",
                    "pool/main/a/apt/apt_2.6.1_amd64.deb",
                    '1',
                ),
                image_deb(
                    "base-files",
                    "12.4+deb12u12",
                    "amd64",
                    "pool/main/b/base-files/base-files_12.4+deb12u12_amd64.deb",
                    '2',
                ),
                image_deb(
                    "libc6",
                    "2.36-9+deb12u13",
                    "amd64",
                    "pool/main/g/glibc/libc6_2.36-9+deb12u13_amd64.deb",
                    'c',
                ),
                image_deb(
                    "openssh-server",
                    "1:9.2p1-2+deb12u6",
                    "amd64",
                    "pool/main/o/openssh/openssh-server_9.2p1-2+deb12u6_amd64.deb",
                    '3',
                ),
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
        cloud_images: Vec::new(),
        providers: Vec::new(),
    }
}

/// Debian 12's AMI of `day` (`20261101`) in `region`, as `envc lock` pins it.
pub fn cloud_image(region: &str, id: &str, day: &str, build: &str) -> CloudImagePin {
    CloudImagePin {
        name: "debian-12".into(),
        provider: "aws".into(),
        region: region.into(),
        owner: "136693071363".into(),
        pattern: "debian-12-amd64-*".into(),
        architecture: "x86_64".into(),
        id: id.into(),
        image_name: format!("debian-12-amd64-{day}-{build}"),
        created: format!("{}-{}-{}T09:15:00.000Z", &day[..4], &day[4..6], &day[6..]),
    }
}

/// `sample` with a cloud machine: Debian 12's AMI pinned in two regions.
pub fn sample_with_cloud() -> Lockfile {
    let mut lock = sample();
    lock.cloud_images = vec![
        cloud_image("us-east-1", "ami-0fedcba9876543210", "20261001", "1890"),
        cloud_image("eu-west-1", "ami-0a1b2c3d4e5f60718", "20261001", "1890"),
    ];
    lock.normalize();
    lock
}

/// A package of `sample`'s image: its size made of its hash's digit, so that each differs.
pub fn image_deb(name: &str, version: &str, arch: &str, filename: &str, hash: char) -> PackagePin {
    PackagePin {
        name: name.into(),
        archive: "debian/bookworm".into(),
        version: version.into(),
        architecture: arch.into(),
        filename: filename.into(),
        size: 1000 + u64::from(hash.to_digit(16).unwrap_or(0)),
        sha256: hex(hash),
        closure: None,
    }
}

/// The test registry's `local` provider at `version`, as `envc lock` pins it: its linux
/// package's `h1:` and a `zh:` per platform, each made of `seed` so that versions differ.
pub fn provider_pin(version: &str, constraints: &str, seed: u8) -> ProviderPin {
    use crate::provider::{Constraints, PackageHash, ProviderAddress, Version};
    ProviderPin {
        address: ProviderAddress::parse("registry.envc.test/envc-test/local").unwrap(),
        version: Version::parse(version).unwrap(),
        constraints: Constraints::parse(constraints).unwrap(),
        hashes: vec![
            PackageHash::Zh([seed.wrapping_add(1); 32]),
            PackageHash::H1([seed; 32]),
            PackageHash::Zh([seed; 32]),
        ],
    }
}

/// `sample` with a `resource` node's provider pinned.
pub fn sample_with_provider() -> Lockfile {
    let mut lock = sample();
    lock.providers = vec![provider_pin("0.1.0", "~> 0.1.0", 0x0f)];
    lock.normalize();
    lock
}
