# envc checks: one attempt of one probe, run on the target as
#   sh -c SCRIPT envc
# with KIND and its arguments on stdin, one base64 line each and a line `.`, decoded with
# the shell's builtins: an argument (a `command` check's script may hold a secret) is
# never on a command line, where `ps` would show it.
# It prints what it saw (bounded) and exits 0 when the check holds, 1 when it does not
# (the caller tries again until the check's timeout), 2 when it cannot be run at all (a
# tool the probe needs is missing: trying again would not help).
set --
while read -r line; do
  [ "$line" = . ] && break
  # The x keeps trailing newlines that $(...) would strip.
  arg=$(printf '%s' "$line" | base64 -d && echo x) || { echo "cannot decode the check's arguments"; exit 2; }
  set -- "$@" "${arg%x}"
done
kind=$1
shift

# tcp and plain http use bash's /dev/tcp: bash is essential on Debian, curl and wget
# are not.
net='
case $1 in
tcp)
  if exec 3<>"/dev/tcp/$3/$2"; then
    echo "$3:$2 accepts connections"
    exit 0
  fi
  echo "$3:$2 does not accept connections"
  exit 1 ;;
http)
  # From the environment, not arguments: the URL and the text may hold a secret.
  url=$ENVC_URL status=$ENVC_STATUS needle=$ENVC_NEEDLE
  rest=${url#http://}
  case $rest in
  */*) hostport=${rest%%/*} path=/${rest#*/} ;;
  *) hostport=$rest path=/ ;;
  esac
  auth=
  case $hostport in
  *@*)
    auth="Authorization: Basic $(printf "%s" "${hostport%@*}" | base64 -w0)\r\n"
    hostport=${hostport##*@} ;;
  esac
  case $hostport in
  *:*) host=${hostport%:*} port=${hostport##*:} ;;
  *) host=$hostport port=80 ;;
  esac
  if ! exec 3<>"/dev/tcp/$host/$port"; then
    echo "GET $url: cannot connect to $host:$port"
    exit 1
  fi
  printf "GET %s HTTP/1.0\r\nHost: %s\r\n${auth}User-Agent: envc-check\r\nConnection: close\r\n\r\n" "$path" "$hostport" >&3
  response=$(head -c 65536 <&3 | tr -d "\000")
  exec 3<&-
  line=$(printf "%s\n" "$response" | head -n 1 | tr -d "\r")
  body=$(printf "%s\n" "$response" | sed "1,/^\r*\$/d")
  code=${line#* }
  code=${code%% *}
  echo "GET $url: $line"
  if [ "$code" != "$status" ]; then
    echo "expected status $status"
    printf "%s\n" "$body" | head -c 2048
    exit 1
  fi
  if [ -n "$needle" ]; then
    case $body in
    *"$needle"*) echo "the body contains \"$needle\"" ;;
    *)
      echo "the body does not contain \"$needle\":"
      printf "%s\n" "$body" | head -c 2048
      exit 1 ;;
    esac
  fi
  exit 0 ;;
esac
'

case $kind in
tcp)
  command -v bash >/dev/null 2>&1 || { echo "bash is not installed on the target (the tcp check uses its /dev/tcp)"; exit 2; }
  exec bash -c "$net" envc tcp "$1" "$2" 2>&1
  ;;
http)
  case $1 in
  http://*)
    command -v bash >/dev/null 2>&1 || { echo "bash is not installed on the target (the http check uses its /dev/tcp)"; exit 2; }
    ENVC_URL=$1 ENVC_STATUS=$2 ENVC_NEEDLE=$3 exec bash -c "$net" envc http 2>&1
    ;;
  https://*)
    command -v curl >/dev/null 2>&1 || { echo "https checks need curl on the target; install it, or check over http://"; exit 2; }
    out=$(mktemp) || exit 2
    # The URL goes to curl in a config on stdin (`-K -`), not as an argument.
    quoted=$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')
    code=$(printf 'url = "%s"\n' "$quoted" | curl -sS -K - -o "$out" -w '%{http_code}' --max-time 10 2>&1) || { echo "GET $1: $code"; rm -f "$out"; exit 1; }
    echo "GET $1: status $code"
    if [ "$code" != "$2" ]; then
      echo "expected status $2"; head -c 2048 "$out"; rm -f "$out"; exit 1
    fi
    # Compared in the shell, as over http://: the text may hold a secret.
    body=$(head -c 65536 "$out" | tr -d '\000')
    case $body in
    *"$3"*) ;;
    *) echo "the body does not contain \"$3\":"; head -c 2048 "$out"; rm -f "$out"; exit 1 ;;
    esac
    rm -f "$out"; exit 0
    ;;
  *) echo "not an http:// or https:// URL: $1"; exit 2 ;;
  esac
  ;;
command)
  out=$(mktemp) || exit 2
  err=$(mktemp) || { rm -f "$out"; exit 2; }
  script=$(umask 077 && mktemp) || { rm -f "$out" "$err"; exit 2; }
  trap 'rm -f "$out" "$err" "$script"' EXIT
  trap 'exit 124' TERM INT
  # From a file, not `sh -c`: its text never shows in the process list.
  printf '%s\n' "$1" >"$script"
  sh "$script" >"$out" 2>"$err" </dev/null
  rc=$?
  echo "exit status $rc"
  [ -s "$out" ] && { echo "stdout:"; tail -c 2048 "$out"; echo; }
  [ -s "$err" ] && { echo "stderr:"; tail -c 2048 "$err"; echo; }
  if [ "$rc" != "$2" ]; then
    echo "expected exit status $2"; exit 1
  fi
  if [ -n "$3" ] && ! grep -qF -- "$3" "$out"; then
    echo "stdout does not contain \"$3\""; exit 1
  fi
  exit 0
  ;;
installed)
  status=$(dpkg-query -W -f='${Status}\t${Version}' "$1" 2>&1) || { echo "package $1 is not installed ($status)"; exit 1; }
  version=${status#*	}
  case $status in
  *" installed	"*) ;;
  *) echo "package $1 is not installed (${status%%	*})"; exit 1 ;;
  esac
  echo "package $1 $version is installed"
  if [ -n "$2" ] && ! dpkg --compare-versions "$version" ge "$2"; then
    echo "expected at least $2"; exit 1
  fi
  if [ -n "$3" ] && ! dpkg --compare-versions "$version" lt "$3"; then
    echo "expected below $3"; exit 1
  fi
  exit 0
  ;;
os_release)
  [ -r /etc/os-release ] || { echo "/etc/os-release is missing"; exit 1; }
  found=$(. /etc/os-release; printf '%s\t%s' "${ID:-}" "${VERSION_ID:-}")
  id=${found%%	*} version_id=${found#*	}
  echo "ID=$id VERSION_ID=$version_id"
  if [ "$id" != "$1" ]; then echo "expected ID=$1"; exit 1; fi
  if [ -n "$2" ] && [ "$version_id" != "$2" ]; then echo "expected VERSION_ID=$2"; exit 1; fi
  exit 0
  ;;
free_space)
  dir=$1
  while [ ! -e "$dir" ] && [ "$dir" != / ]; do dir=$(dirname "$dir"); done
  avail=$(df -Pk "$dir" 2>&1 | awk 'NR == 2 { print $4 }')
  case $avail in
  '' | *[!0-9]*) echo "cannot read the free space of $dir: $(df -Pk "$dir" 2>&1)"; exit 1 ;;
  esac
  echo "$((avail / 1024)) MiB available on the filesystem of $dir"
  if [ "$((avail * 1024))" -lt "$2" ]; then
    echo "expected at least $(($2 / 1048576)) MiB"; exit 1
  fi
  exit 0
  ;;
empty_dir)
  if [ ! -e "$1" ]; then echo "$1 does not exist"; exit 0; fi
  if [ ! -d "$1" ]; then echo "$1 is not a directory"; exit 1; fi
  entries=$(ls -A "$1" | head -n 10)
  if [ -n "$entries" ]; then echo "$1 is not empty:"; echo "$entries"; exit 1; fi
  echo "$1 is empty"
  exit 0
  ;;
*) echo "unknown check: $kind"; exit 2 ;;
esac
