#!/usr/bin/env bash
# Install AMP Lab as a systemd service from this checkout (docs/deploy.md, "The service"): a user of its own
# (amp-lab), the venv `make install` builds, the state in /var/lib/amp-lab, the settings in /etc/amp-lab/amp-lab.env
# (from deploy/amp-lab.env.example the first time), and an hourly backup. Run as root: sudo make install-service.
#   deploy/install-service.sh --render DIR    only write the units, with this checkout's path, into DIR
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
UNITS="amp-lab.service amp-lab-backup.service amp-lab-backup.timer"

render() {
    mkdir -p "$1"
    for unit in $UNITS; do
        sed "s|/opt/amp-lab|$ROOT|g" "$ROOT/deploy/$unit" >"$1/$unit"
    done
}

if [ "${1:-}" = "--render" ]; then
    render "${2:?--render needs a folder}"
    exit 0
fi
fail() { echo "install-service: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run it as root (sudo make install-service)"
# Checked before anything changes: systemd's own test for whether it is the init system (sd_booted).
[ -d /run/systemd/system ] || fail "this machine does not run systemd: use the image instead (docs/deploy.md)"
case "$ROOT/" in
    /home/* | /root/* | /run/user/*)
        fail "the service cannot read $ROOT (ProtectHome hides /home and /root): clone into /opt/amp-lab instead" ;;
esac

id amp-lab >/dev/null 2>&1 || useradd --system --home-dir /var/lib/amp-lab --no-create-home \
    --shell /usr/sbin/nologin amp-lab
make -C "$ROOT" install
install -d -m 0750 -o root -g amp-lab /etc/amp-lab
if [ ! -e /etc/amp-lab/amp-lab.env ]; then
    install -m 0640 -o root -g amp-lab "$ROOT/deploy/amp-lab.env.example" /etc/amp-lab/amp-lab.env
    echo "==> wrote /etc/amp-lab/amp-lab.env: set the instructor's password and the limits there"
fi
render /etc/systemd/system
systemctl daemon-reload
systemctl enable --now amp-lab.service amp-lab-backup.timer
echo "==> amp-lab.service started: systemctl status amp-lab; journalctl -u amp-lab -f"
