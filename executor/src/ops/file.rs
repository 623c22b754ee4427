//! Files: uploaded to a temporary name beside the destination, given owner, group and
//! mode, then renamed into place, so a reader never sees a partial file. Facts: the
//! content's sha256, owner, group and mode, as observed afterwards.

use sha2::Digest;

use super::{item_lines, missing, run_script, Applied, Facts};
use crate::transport::{Transport, TransportError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileSpec {
    pub path: String,
    pub content: Vec<u8>,
    pub owner: String,
    pub group: String,
    pub mode: u32,
}

/// What a correct apply of this content and metadata observes.
pub fn file_facts(content: &[u8], owner: &str, group: &str, mode: u32) -> Facts {
    let sha: String = sha2::Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Facts::from([
        ("sha256".to_string(), sha),
        ("owner".to_string(), owner.to_string()),
        ("group".to_string(), group.to_string()),
        ("mode".to_string(), format!("{:04o}", mode & 0o7777)),
    ])
}

/// Prints `OK\t$n\t<sha256>\t<owner>\t<group>\t<mode>` for "$path", or `NO\t$n`.
const FACTS_FN: &str = r#"
facts() {
  if [ -f "$path" ]; then
    sum=$(sha256sum < "$path" | cut -c1-64) || return 1
    meta=$(stat -c '%U	%G	%a' -- "$path") || return 1
    m=${meta##*	}; while [ ${#m} -lt 4 ]; do m=0$m; done
    printf 'OK\t%s\t%s\t%s\t%s\n' "$n" "$sum" "${meta%	*}" "$m"
  else
    printf 'NO\t%s\n' "$n"
  fi
}
oneline() { tr '\n\t' '  ' | cut -c1-400; }
"#;

const APPLY: &str = r#"
n=0
while [ $# -ge 5 ]; do
  path=$1; owner=$2; group=$3; mode=$4; size=$5; shift 5
  existed=0; [ -e "$path" ] && existed=1
  dir=$(dirname -- "$path")
  if ! err=$(mkdir -p -- "$dir" 2>&1) || ! tmp=$(mktemp -- "$dir/.envc-new.XXXXXX" 2>&1); then
    head -c "$size" > /dev/null
    printf 'ERR\t%s\tcannot write in %s: %s\n' "$n" "$dir" "$(printf %s "$err$tmp" | oneline)"
    n=$((n+1)); continue
  fi
  trap 'rm -f -- "$tmp"' EXIT HUP INT TERM
  if ! err=$(head -c "$size" 2>&1 > "$tmp") || [ "$(wc -c < "$tmp")" -ne "$size" ]; then
    rm -f -- "$tmp"
    printf 'ERR\t%s\tcould not write all %s bytes: %s\n' "$n" "$size" "$(printf %s "$err" | oneline)"
    n=$((n+1)); continue
  fi
  if ! err=$(chown -- "$owner:$group" "$tmp" 2>&1 && chmod -- "$mode" "$tmp" 2>&1 && mv -f -- "$tmp" "$path" 2>&1); then
    rm -f -- "$tmp"
    printf 'ERR\t%s\t%s\n' "$n" "$(printf %s "$err" | oneline)"
  else
    line=$(facts) && printf '%s\t%s\n' "$line" "$existed"
  fi
  trap - EXIT HUP INT TERM
  n=$((n+1))
done
"#;

const PROBE: &str = r#"
n=0
for path in "$@"; do facts; n=$((n+1)); done
"#;

const REMOVE: &str = r#"
n=0
for path in "$@"; do
  if err=$(rm -f -- "$path" 2>&1); then printf 'OK\t%s\n' "$n"
  else printf 'ERR\t%s\t%s\n' "$n" "$(printf %s "$err" | oneline)"; fi
  n=$((n+1))
done
"#;

fn parse_facts(fields: &[String]) -> Option<Facts> {
    let [sha, owner, group, mode, ..] = fields else {
        return None;
    };
    Some(Facts::from([
        ("sha256".to_string(), sha.clone()),
        ("owner".to_string(), owner.clone()),
        ("group".to_string(), group.clone()),
        ("mode".to_string(), mode.clone()),
    ]))
}

/// Places a batch of files; one result per file, in order.
pub async fn apply_files(
    t: &Transport,
    files: &[FileSpec],
) -> Result<Vec<Result<Applied, String>>, TransportError> {
    let mut args = Vec::with_capacity(files.len() * 5);
    let mut stdin = Vec::new();
    for f in files {
        args.extend([
            f.path.clone(),
            f.owner.clone(),
            f.group.clone(),
            format!("{:o}", f.mode & 0o7777),
            f.content.len().to_string(),
        ]);
        stdin.extend_from_slice(&f.content);
    }
    let out = run_script(t, &format!("{FACTS_FN}{APPLY}"), &args, &stdin).await?;
    let lines = item_lines(&out);
    Ok((0..files.len())
        .map(|n| match lines.get(&n) {
            Some((tag, fields)) if tag == "OK" => match parse_facts(fields) {
                Some(facts) => Ok(Applied {
                    facts,
                    created: fields.get(4).map(String::as_str) == Some("0"),
                }),
                None => Err("the target reported facts envc cannot read".into()),
            },
            Some((tag, fields)) if tag == "ERR" => Err(fields.join(" ")),
            _ => Err(missing(&out)),
        })
        .collect())
}

/// The facts of each path now (`None`: absent or not a regular file).
pub async fn probe_files(
    t: &Transport,
    paths: &[String],
) -> Result<Vec<Option<Facts>>, TransportError> {
    let out = run_script(t, &format!("{FACTS_FN}{PROBE}"), paths, b"").await?;
    let lines = item_lines(&out);
    Ok((0..paths.len())
        .map(|n| match lines.get(&n) {
            Some((tag, fields)) if tag == "OK" => parse_facts(fields),
            _ => None,
        })
        .collect())
}

/// Deletes each path (one already gone is fine).
pub async fn remove_files(
    t: &Transport,
    paths: &[String],
) -> Result<Vec<Result<(), String>>, TransportError> {
    let out = run_script(t, &format!("{FACTS_FN}{REMOVE}"), paths, b"").await?;
    let lines = item_lines(&out);
    Ok((0..paths.len())
        .map(|n| match lines.get(&n) {
            Some((tag, _)) if tag == "OK" => Ok(()),
            Some((_, fields)) => Err(fields.join(" ")),
            None => Err(missing(&out)),
        })
        .collect())
}
