package main

import (
	"fmt"
	"slices"
	"testing"
)

// localClusterFiles are the two config files of the one-machine cluster
// recipe in docs/operations.md.
var localClusterFiles = []string{"../../configs/cluster-node1.yaml", "../../configs/cluster-node2.yaml"}

// TestLocalClusterConfigs: the two files of the one-machine cluster
// recipe load, share one Redis, and differ where two processes on one
// machine must: node_id, data_dir and every listening port.
func TestLocalClusterConfigs(t *testing.T) {
	var cfgs []Config
	for _, f := range localClusterFiles {
		cfg, err := loadConfig([]string{"--config", f}, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cfgs = append(cfgs, cfg)
	}
	a, b := cfgs[0], cfgs[1]
	if a.Store.Type != "redis" || !slices.Equal(a.Store.Redis.Addrs, b.Store.Redis.Addrs) {
		t.Errorf("the nodes do not share one Redis: %+v and %+v", a.Store, b.Store)
	}
	if a.NodeID == b.NodeID || a.DataDir == b.DataDir {
		t.Errorf("node_id %d and %d, data_dir %s and %s: each node needs its own", a.NodeID, b.NodeID, a.DataDir, b.DataDir)
	}
	ports := map[string]string{}
	for i, c := range cfgs {
		for what, addr := range map[string]string{"http.addr": c.HTTP.Addr, "mqtt.tcp_addr": c.MQTT.TCPAddr, "mqtt.tls_addr": c.MQTT.TLSAddr, "mqtt.ws_addr": c.MQTT.WSAddr} {
			if other, taken := ports[addr]; taken {
				t.Errorf("%s %s of node %d is also %s", what, addr, i+1, other)
			}
			ports[addr] = fmt.Sprintf("%s of node %d", what, i+1)
		}
	}
}

// TestLocalClusterRuns starts the two nodes from those very files (on a
// Redis of the test's own and free ports, through the flags that override
// a file) and checks they form one service: a device created through node
// 1 and connected to node 2 gets a message sent through node 1.
func TestLocalClusterRuns(t *testing.T) {
	rdb := redisForTest(t)
	var nodes []*fleet
	for _, f := range localClusterFiles {
		s := startServer(t, "--config", f, "--data_dir", t.TempDir(), "--store.redis.addrs", rdb.Addr,
			"--http.tls.enabled=false", "--admin.password", "pw", "--rate_limit.default", "0")
		nodes = append(nodes, &fleet{t: t, s: s})
	}
	n1, n2 := nodes[0], nodes[1]
	secret := n1.createDevice("local-1")
	d := n2.mustConnect("local-1", secret, "msg")
	id := n1.send("local-1", "across the nodes", 60)
	n1.waitState(id, "delivered")
	if got := d.received(); len(got) != 1 || got[0] != fmt.Sprint(id) {
		t.Fatalf("the device on node 2 received %v, want [%d]", got, id)
	}
}
