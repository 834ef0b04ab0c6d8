# Shared by scripts/test and scripts/demo: install what the project needs, idempotently.
# Sourced, not run. Defines ensure_venv SET (pins|latest|demo), ensure_system_tools (browser and
# proxy), ensure_proxy and ensure_databases.

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"

log() { printf '\033[1m[%s]\033[0m %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The pins set is the z2jh hub image (JupyterHub 5.5, kubespawner 7.1, SQLAlchemy 2.0, tornado 6.5);
# the latest set takes the newest releases. Both install this package with its test and docs
# extras. The demo set installs only what scripts/demo runs: the package and its demo extra.
ensure_venv() {
    # one installer per environment at a time: scripts/test runs the dependency sets side by
    # side, and both may start scripts/demo, which installs the demo set on first use
    mkdir -p "$REPO_ROOT/.venvs"
    local lock rc
    exec {lock}>"$REPO_ROOT/.venvs/.$1.lock"
    flock "$lock"
    _ensure_venv_unlocked "$1"
    rc=$?
    exec {lock}>&-
    return $rc
}

_ensure_venv_unlocked() {
    local set="$1" venv="$REPO_ROOT/.venvs/$1" stamp constraints=() extras="test,docs"
    case "$set" in
        pins)
            # vendored from z2jh with its source commit (vendor/z2jh/README.md)
            constraints=(-c "$REPO_ROOT/vendor/z2jh/hub-image-requirements.txt")
            ;;
        latest) ;;
        demo) extras="demo" ;;
        *) log "unknown dependency set '$set' (use pins, latest or demo)"; return 1 ;;
    esac
    stamp="$(cat "$REPO_ROOT/setup.cfg" "${constraints[1]:-/dev/null}" | sha256sum | cut -c1-16)"
    if [ -f "$venv/.stamp" ] && [ "$(cat "$venv/.stamp")" = "$stamp" ]; then
        VENV="$venv"
        # every time: a rebuilt labextension has new file names (content hashes)
        copy_data_files "$venv"
        return
    fi
    log "installing the '$set' dependency set into $venv"
    [ -x "$venv/bin/python" ] || "$PYTHON" -m venv "$venv"
    local pip_log="$venv/pip-install.log"
    if ! "$venv/bin/python" -m pip install -q --upgrade pip >"$pip_log" 2>&1; then
        grep -v "is ignored" "$pip_log" >&2; return 1
    fi
    local upgrade=()
    [ "$set" = latest ] && upgrade=(--upgrade --upgrade-strategy eager)
    if ! "$venv/bin/python" -m pip install -q "${upgrade[@]}" "${constraints[@]}" \
            -e "$REPO_ROOT[$extras]" >"$pip_log" 2>&1; then
        grep -v "is ignored" "$pip_log" | tail -n 40 >&2
        return 1
    fi
    "$venv/bin/python" -c "import jhub_gpubooking, jupyterhub, kubespawner, sqlalchemy, tornado" || return 1
    copy_data_files "$venv" || return 1
    echo "$stamp" > "$venv/.stamp"
    VENV="$venv"
}

# An editable install leaves out setup.cfg's [options.data_files] (the Jupyter server extension's
# enabling config, the prebuilt labextension): copy each into the venv where the wheel puts it, so
# the single-user servers of the tests and the demo load them as a user image's would. Copies, not
# links: tornado >= 6.5.9 refuses to serve static files through symlinks leading out of their folder
# (the labextension would not load on the latest set). The files copied last time are listed in
# the venv, so one that is gone from the checkout (an older build's remoteEntry.<hash>.js) goes too.
copy_data_files() {
    "$1/bin/python" - "$REPO_ROOT" "$1" <<'PY'
import configparser, json, pathlib, shutil, sys
repo, venv = (pathlib.Path(arg) for arg in sys.argv[1:])
record = venv / ".data-files.json"
config = configparser.ConfigParser()
config.optionxform = str  # keep the target folders' case
config.read(repo / "setup.cfg")
wanted = {}
for target, sources in config["options.data_files"].items():
    for pattern in sources.split():
        for source in sorted(repo.glob(pattern)):
            wanted[venv / target / source.name] = source
previous = json.loads(record.read_text()) if record.exists() else []
for name in previous:  # relative to the venv
    if venv / name not in wanted:
        (venv / name).unlink(missing_ok=True)
for copy, source in wanted.items():
    for folder in reversed(copy.relative_to(venv).parents):
        if (venv / folder).is_symlink():  # a whole folder linked by an older setup
            (venv / folder).unlink()
    copy.parent.mkdir(parents=True, exist_ok=True)
    if copy.is_symlink():  # a link made by an older setup
        copy.unlink()
    shutil.copyfile(source, copy)
record.write_text(json.dumps(sorted(str(path.relative_to(venv)) for path in wanted)))
PY
}

# What the tests need besides Python: a browser and the proxy.
ensure_system_tools() {
    ensure_browser
    ensure_proxy
}

# Debian's Chromium (Playwright's own browser download cannot work here).
ensure_browser() {
    if [ ! -x /usr/bin/chromium ]; then
        if [ "$(id -u)" = 0 ]; then
            log "installing Chromium from Debian"
            (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null \
                || log "could not install chromium: browser tests will be skipped"
        else
            log "Chromium is missing and we are not root: browser tests will be skipped"
        fi
    fi
}

# configurable-http-proxy from npm, which the Hub starts (tests and demo).
ensure_proxy() {
    if ! command -v configurable-http-proxy >/dev/null 2>&1; then
        local prefix="$REPO_ROOT/.venvs/node"
        if [ ! -x "$prefix/bin/configurable-http-proxy" ]; then
            log "installing configurable-http-proxy from npm"
            npm install -g --prefix "$prefix" configurable-http-proxy@5 >/dev/null 2>&1 \
                || { log "npm could not install configurable-http-proxy"; return 1; }
        fi
        export PATH="$prefix/bin:$PATH"
    fi
}

# The suite talks to the machine's PostgreSQL and MariaDB; start them if they are installed but stopped.
ensure_databases() {
    if command -v pg_ctlcluster >/dev/null 2>&1 && ! (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; then
        log "starting PostgreSQL"
        pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start 2>/dev/null || true
    fi
    if [ -x /usr/sbin/mariadbd ] && ! (exec 3<>/dev/tcp/127.0.0.1/3306) 2>/dev/null; then
        log "starting MariaDB"
        start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd 2>/dev/null || true
        sleep 3
    fi
}
