//! Sizes as the language writes them (`512MiB`). Below both the values and the types that
//! print them (`size(1GiB..=64GiB)`), so that a type's text needs no value.

/// Sizes print in the largest binary unit that divides them exactly.
pub fn format_size(n: u64) -> String {
    for (unit, factor) in [
        ("TiB", 1u64 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ] {
        if n >= factor && n.is_multiple_of(factor) {
            return format!("{}{unit}", n / factor);
        }
    }
    format!("{n}B")
}
