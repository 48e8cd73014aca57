#!/usr/bin/env bash
# Install gbatch as one system-wide head daemon for a lab (run as root; safe to rerun):
#   - a system user `gbatch` (home /var/lib/gbatch, 0700) that alone holds the fleet's
#     SSH key, its known_hosts and the job store;
#   - a group `gbatch-users`: its members may use gbatch (the socket is 0660, theirs);
#   - gbatch in a virtualenv under /opt/gbatch, and the systemd unit gbatchd.service.
# It never overwrites a config.yaml, an inventory or a key that is already there, and
# it neither enables nor starts the service: it prints the next steps instead.
#
# Settings (environment): GBATCH_SERVICE_USER (gbatch), GBATCH_USERS_GROUP
# (gbatch-users), GBATCH_PREFIX (/opt/gbatch), GBATCH_STATE_DIR (/var/lib/gbatch).
set -euo pipefail

SERVICE_USER="${GBATCH_SERVICE_USER:-gbatch}"
USERS_GROUP="${GBATCH_USERS_GROUP:-gbatch-users}"
PREFIX="${GBATCH_PREFIX:-/opt/gbatch}"
STATE="${GBATCH_STATE_DIR:-/var/lib/gbatch}"
SOCKET=/run/gbatch/gbatchd.sock
UNIT=/etc/systemd/system/gbatchd.service
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

die() { echo "install-system.sh: error: $*" >&2; exit 1; }
step() { echo "==> $*"; }

[ "$(id -u)" = 0 ] || die "run as root (it adds a user, a group and a systemd unit)"
for tool in useradd groupadd python3 ssh-keygen install; do
    command -v "$tool" >/dev/null || die "$tool is missing; install it first"
done
[ -f "$SRC/pyproject.toml" ] || die "$SRC is not a gbatch checkout (no pyproject.toml)"

step "group $USERS_GROUP (members may use gbatch)"
getent group "$USERS_GROUP" >/dev/null || groupadd --system "$USERS_GROUP"

step "service user $SERVICE_USER (home $STATE)"
if ! id -u "$SERVICE_USER" >/dev/null 2>&1; then
    useradd --system --user-group --home-dir "$STATE" --no-create-home \
        --shell /usr/sbin/nologin --comment "gbatch head daemon" "$SERVICE_USER"
fi
install -d -m 0700 -o "$SERVICE_USER" -g "$SERVICE_USER" "$STATE" "$STATE/ssh"

step "SSH key the head logs in to the hosts with: $STATE/ssh/id_ed25519"
if [ ! -f "$STATE/ssh/id_ed25519" ]; then
    ssh-keygen -q -t ed25519 -N '' -C "gbatch@$(hostname)" -f "$STATE/ssh/id_ed25519"
fi
chown "$SERVICE_USER:$SERVICE_USER" "$STATE/ssh/id_ed25519" "$STATE/ssh/id_ed25519.pub"
chmod 0600 "$STATE/ssh/id_ed25519"

step "config $STATE/config.yaml"
if [ ! -e "$STATE/config.yaml" ]; then
    install -m 0600 -o "$SERVICE_USER" -g "$SERVICE_USER" /dev/null "$STATE/config.yaml"
    cat >"$STATE/config.yaml" <<CONFIG
# gbatchd for the lab (deploy/install-system.sh). Members of $USERS_GROUP use gbatch.
socket_path: $SOCKET
socket_group: $USERS_GROUP
socket_mode: '660'
CONFIG
fi

step "gbatch in $PREFIX/venv"
install -d -m 0755 "$PREFIX"
[ -x "$PREFIX/venv/bin/python" ] || python3 -m venv "$PREFIX/venv"
"$PREFIX/venv/bin/pip" install --quiet --upgrade "$SRC"
ln -sf "$PREFIX/venv/bin/gbatch" /usr/local/bin/gbatch

step "systemd unit $UNIT"
sed -e "s#^User=.*#User=$SERVICE_USER#" \
    -e "s#^Group=.*#Group=$SERVICE_USER#" \
    -e "s#^SupplementaryGroups=.*#SupplementaryGroups=$USERS_GROUP#" \
    -e "s#/opt/gbatch/#$PREFIX/#" \
    -e "s#/var/lib/gbatch#$STATE#g" \
    "$SRC/deploy/systemd/gbatchd.service" >"$UNIT.tmp"
chmod 0644 "$UNIT.tmp"
mv "$UNIT.tmp" "$UNIT"
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
    systemctl daemon-reload
fi

cat <<NEXT

gbatch is installed. Next steps:
  1. Describe the GPU hosts in $STATE/inventory.yaml (see inventory.example.yaml),
     with   defaults: {identity_file: $STATE/ssh/id_ed25519}
     and add this public key to each host's login user's authorized_keys:
       $(cat "$STATE/ssh/id_ed25519.pub")
     (chown $SERVICE_USER $STATE/inventory.yaml; chmod 600 it)
  2. Start the daemon:          systemctl enable --now gbatchd
  3. Trust each host's SSH key, after checking its fingerprint on the host
     (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub there):
                                gbatch node trust gpu01
  4. Install the agent:         gbatch node install --all
  5. Let people in:             usermod -aG $USERS_GROUP alice   (they log in again)
     They reach the daemon at $SOCKET with no setting at all; everyone else is refused.
NEXT
