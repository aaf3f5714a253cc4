package netlab

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The kernel's counters as the lab reads them: /proc/net/snmp of a
// namespace, `tc -s -j qdisc show`, `nft -j list table`.

// parseSNMP reads /proc/net/snmp: pairs of lines "Proto: names…" and
// "Proto: values…", into "Proto.Name" → value.
func parseSNMP(b []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	var head []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if head == nil || head[0] != f[0] {
			head = f
			continue
		}
		if len(f) != len(head) {
			return nil, fmt.Errorf("snmp: %s: %d values for %d names", f[0], len(f)-1, len(head)-1)
		}
		proto := strings.TrimSuffix(f[0], ":")
		for i := 1; i < len(f); i++ {
			if v, err := strconv.ParseInt(f[i], 10, 64); err == nil && v >= 0 {
				out[proto+"."+head[i]] = uint64(v)
			}
		}
		head = nil
	}
	return out, sc.Err()
}

// qdiscDrops sums "drops" of `tc -s -j qdisc show`.
func qdiscDrops(b []byte) (uint64, error) {
	var qs []struct {
		Drops uint64 `json:"drops"`
	}
	if err := json.Unmarshal(b, &qs); err != nil {
		return 0, fmt.Errorf("tc -j: %w", err)
	}
	var n uint64
	for _, q := range qs {
		n += q.Drops
	}
	return n, nil
}

// nftDrops sums the packet counters of `nft -j list table`.
func nftDrops(b []byte) (uint64, error) {
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Expr []struct {
					Counter *struct {
						Packets uint64 `json:"packets"`
					} `json:"counter"`
				} `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return 0, fmt.Errorf("nft -j: %w", err)
	}
	var n uint64
	for _, o := range doc.Nftables {
		if o.Rule == nil {
			continue
		}
		for _, e := range o.Rule.Expr {
			if e.Counter != nil {
				n += e.Counter.Packets
			}
		}
	}
	return n, nil
}
