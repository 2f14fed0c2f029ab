# Sourced by the tests and benchmarks that put ferry's client and workers on
# hosts of their own: three network namespaces, each with one interface on
# a switch (a bridge in a fourth namespace), one subnet:
#
#   client 10.77.0.1    w1 10.77.0.2    w2 10.77.0.3
#
# Every link is shaped to RATE both ways: each host's egress by an htb tree
# with one class per destination host (so the bytes from any host to any
# other can be read off its classes), and the switch's port toward each host
# by tbf.
#
# One interface per host on purpose: UCX's TCP transport offers all of a
# host's interfaces, and with several of equal (here unknown) speed the two
# ends of a connection may pick different ones and drop it ("Endpoint
# timeout", about half the connections with UCX 1.13); on hosts with several
# networks, UCX_NET_DEVICES names the one to use.
#
#   netns_hosts_up RATE      e.g. 1gbit; sets ns_client, ns_w1, ns_w2 or
#                            returns 1 with netns_skip_reason set
#   netns_bytes_sent NS N    bytes host NS has sent to host 10.77.0.N
#   netns_hosts_down
#
# Needs root and network namespaces (`ip netns`).

export PATH="$PATH:/usr/sbin:/sbin"
netns_tag="ferry$$"
ns_switch="${netns_tag}_sw"
ns_client="${netns_tag}_c"
ns_w1="${netns_tag}_w1"
ns_w2="${netns_tag}_w2"
netns_dev="eth0"

netns_hosts_down() {
  local ns
  for ns in "$ns_client" "$ns_w1" "$ns_w2" "$ns_switch"; do
    ip netns del "$ns" 2>/dev/null
  done
  return 0
}

# netns_host NS N RATE: host NS at 10.77.0.N on switch port pN.
netns_host() {
  local ns="$1" n="$2" rate="$3" m
  local port="p${n}_$$" peer="h${n}_$$"
  ip link add "$peer" type veth peer name "$port" || return 1
  ip link set "$port" netns "$ns_switch" && ip link set "$peer" netns "$ns" || return 1
  ip -n "$ns" link set "$peer" name "$netns_dev" || return 1
  ip -n "$ns" addr add "10.77.0.$n/24" dev "$netns_dev" || return 1
  ip -n "$ns" link set "$netns_dev" up && ip -n "$ns" link set lo up || return 1
  ip -n "$ns_switch" link set "$port" master br0 && ip -n "$ns_switch" link set "$port" up ||
    return 1
  ip netns exec "$ns_switch" tc qdisc add dev "$port" root tbf rate "$rate" burst 256kb \
    latency 50ms || return 1
  # The host's egress: class 1:1M carries what goes to 10.77.0.M, 1:199 the
  # rest (ARP), all within RATE.
  ip netns exec "$ns" tc qdisc add dev "$netns_dev" root handle 1: htb default 199 r2q 1000 &&
    ip netns exec "$ns" tc class add dev "$netns_dev" parent 1: classid 1:1 htb rate "$rate" \
      burst 256kb || return 1
  for m in 1 2 3 99; do
    ip netns exec "$ns" tc class add dev "$netns_dev" parent 1:1 classid "1:1$m" htb \
      rate 1mbit ceil "$rate" burst 256kb quantum 1514 || return 1
    ((m == 99)) && continue
    ip netns exec "$ns" tc filter add dev "$netns_dev" parent 1: protocol ip prio 1 u32 \
      match ip dst "10.77.0.$m/32" flowid "1:1$m" || return 1
  done
}

netns_hosts_up() {
  local rate="$1" ns
  netns_skip_reason=""
  if [[ $(id -u) -ne 0 ]]; then
    netns_skip_reason="needs root for network namespaces"
    return 1
  fi
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    netns_skip_reason="no ip/tc"
    return 1
  fi
  for ns in "$ns_switch" "$ns_client" "$ns_w1" "$ns_w2"; do
    if ! ip netns add "$ns" 2>/dev/null; then
      netns_skip_reason="cannot create network namespaces here"
      netns_hosts_down
      return 1
    fi
  done
  if ! ip -n "$ns_switch" link add br0 type bridge || ! ip -n "$ns_switch" link set br0 up ||
     ! netns_host "$ns_client" 1 "$rate" || ! netns_host "$ns_w1" 2 "$rate" ||
     ! netns_host "$ns_w2" 3 "$rate"; then
    netns_skip_reason="no bridge, veth links or tc htb/tbf here"
    netns_hosts_down
    return 1
  fi
}

netns_bytes_sent() {
  ip netns exec "$1" tc -s class show dev "$netns_dev" classid "1:1$2" |
    sed -n 's/^ *Sent \([0-9]*\) bytes.*/\1/p'
}
