# SPDX-License-Identifier: LGPL-2.1-or-later
# Sourced by the integration tests that need a private system bus (never the host's):
#
#   start_bus DIR NAME [POLICY]
#       Start a dbus-daemon of type "system" listening on DIR/NAME.sock (its log in
#       DIR/NAME.log) and export DBUS_SYSTEM_BUS_ADDRESS for it; sets BUS_PID. Without
#       POLICY everybody may own names and call everything (smcd's own checks are under
#       test); with POLICY (a busconfig file such as units/org.smcd.smcd1.conf) the bus
#       has the default policy of /usr/share/dbus-1/system.conf (no method calls, no
#       name ownership) plus that file, so the policy file itself is under test.
#       Prints "not ok - ..." and returns 1 if the bus does not come up in 5 s.

start_bus() {
        local dir=$1 name=$2 policy=${3:-}
        local sock=$dir/$name.sock

        {
                echo '<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"'
                echo ' "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">'
                echo '<busconfig>'
                echo '  <type>system</type>'
                echo "  <listen>unix:path=$sock</listen>"
                echo '  <auth>EXTERNAL</auth>'
                echo '  <policy context="default">'
                echo '    <allow user="*"/>'
                if [ -z "$policy" ]; then
                        echo '    <allow own="*"/>'
                        echo '    <allow send_destination="*"/>'
                        echo '    <allow receive_sender="*"/>'
                        echo '  </policy>'
                else
                        cat <<'CONF'
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
  </policy>
CONF
                        echo "  <include>$(realpath "$policy")</include>"
                fi
                echo '</busconfig>'
        } >"$dir/$name.conf"
        dbus-daemon --config-file="$dir/$name.conf" --nofork --nopidfile 2>"$dir/$name.log" &
        BUS_PID=$!
        for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
        if [ ! -S "$sock" ]; then
                echo "not ok - dbus-daemon did not start: $(cat "$dir/$name.log")"
                return 1
        fi
        export DBUS_SYSTEM_BUS_ADDRESS=unix:path=$sock
}
