package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestDevicesFixture(t *testing.T) {
	var b bytes.Buffer
	if err := runDevices(&b, "../../rdma/rdmadev/testdata/sysfs", false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"rxe0", "ACTIVE", "RoCE v2", "10.0.0.1", "fd00::1", "veth0"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestDevicesJSONFixture(t *testing.T) {
	var b bytes.Buffer
	if err := runDevices(&b, "../../rdma/rdmadev/testdata/sysfs", true); err != nil {
		t.Fatal(err)
	}
	var v struct {
		Devices []struct {
			Name  string
			Ports []struct {
				State string
				GIDs  []struct {
					Index int
					Addr  string
					Type  string
				} `json:"gids"`
			}
		}
	}
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(v.Devices) != 1 || len(v.Devices[0].Ports) != 1 || len(v.Devices[0].Ports[0].GIDs) != 3 || v.Devices[0].Ports[0].GIDs[1].Addr != "10.0.0.1" {
		t.Fatalf("json = %s", b.String())
	}
}

func TestDevicesNone(t *testing.T) {
	var b bytes.Buffer
	if err := runDevices(&b, t.TempDir(), false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no RDMA devices") || !strings.Contains(b.String(), "--nic soft") {
		t.Fatalf("output = %q", b.String())
	}
}
