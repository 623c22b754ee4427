//! How the store spells what it keeps, on disk and in a bucket alike: environment names
//! as file names, keys as hex. Below the store and its shared state, which both use them.

/// Environment names become file names: keep the readable ones, hex-encode the rest
/// (with an `x-` prefix that readable names may not start with, so no two names meet).
pub fn safe_name(env: &str) -> String {
    let readable = !env.is_empty()
        && env.len() <= 100
        && !env.starts_with('.')
        && !env.starts_with("x-")
        && env
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if readable {
        env.to_string()
    } else {
        format!(
            "x-{}",
            env.bytes().map(|b| format!("{b:02x}")).collect::<String>()
        )
    }
}

pub fn hex_key(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn parse_key(text: &str) -> Option<[u8; 32]> {
    let t = text.trim();
    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut key = [0u8; 32];
    for (i, k) in key.iter_mut().enumerate() {
        *k = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

/// The environment whose ref file is named `name`, if `name` is one [`safe_name`] makes.
pub fn env_of_safe_name(name: &str) -> Option<String> {
    let env = match name.strip_prefix("x-") {
        Some(hex) if hex.len() % 2 == 0 => {
            let bytes: Option<Vec<u8>> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect();
            String::from_utf8(bytes?).ok()?
        }
        Some(_) => return None,
        None => name.to_string(),
    };
    (safe_name(&env) == name).then_some(env)
}

/// 16 hex digits no other caller gets: names of things made beside others' (staging
/// directories on targets, control sockets being started). Random; should the system's
/// randomness fail, the process id, the clock and a counter still keep it unique here.
pub fn unique_tag() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mixed = (u64::from(std::process::id()) << 32)
            ^ u64::from(nanos)
            ^ COUNTER.fetch_add(1, Ordering::Relaxed).rotate_left(17);
        bytes = mixed.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
