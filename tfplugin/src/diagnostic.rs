//! What a provider says about a call: errors and warnings, each with the attribute path it
//! is about, which envc turns into a span of the source.

use std::fmt;

use crate::wire;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathStep {
    Attribute(String),
    Key(String),
    Index(i64),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    pub summary: String,
    pub detail: String,
    /// Empty when the diagnostic is about the whole object.
    pub path: Vec<PathStep>,
}

impl Diagnostic {
    pub(crate) fn from_wire(d: wire::Diagnostic) -> Diagnostic {
        Diagnostic {
            // INVALID is what an unset field reads as; a provider that leaves it unset
            // still meant something, and envc treats it as an error, as Terraform does.
            severity: match wire::Severity::try_from(d.severity) {
                Ok(wire::Severity::Warning) => Severity::Warning,
                _ => Severity::Error,
            },
            summary: d.summary,
            detail: d.detail,
            path: d.attribute.map(path_from_wire).unwrap_or_default(),
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

pub(crate) fn path_from_wire(path: wire::AttributePath) -> Vec<PathStep> {
    path.steps
        .into_iter()
        .filter_map(|s| {
            Some(match s.selector? {
                wire::Selector::AttributeName(n) => PathStep::Attribute(n),
                wire::Selector::ElementKeyString(k) => PathStep::Key(k),
                wire::Selector::ElementKeyInt(i) => PathStep::Index(i),
            })
        })
        .collect()
}

/// A path as the language writes it: `network_interface[0].network_ip`, `tags["env"]`.
pub fn path_text(path: &[PathStep]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            PathStep::Attribute(name) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(name);
            }
            PathStep::Key(k) => out.push_str(&format!("[{k:?}]")),
            PathStep::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{severity}: {}", self.summary)?;
        if !self.path.is_empty() {
            write!(f, " (at {})", path_text(&self.path))?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_the_language_writes_them() {
        let path = vec![
            PathStep::Attribute("network_interface".into()),
            PathStep::Index(0),
            PathStep::Attribute("tags".into()),
            PathStep::Key("env".into()),
        ];
        assert_eq!(path_text(&path), r#"network_interface[0].tags["env"]"#);
    }
}
