package control

import "github.com/prometheus/client_golang/prometheus"

// collector reads the controller's state at scrape time.
type collector struct {
	c *Controller

	sessionsActive, sessionsPending, sessionsTotal, sessionsEnded *prometheus.Desc
	poolFree, poolUsed, regTimeouts, syncTimeouts                 *prometheus.Desc
}

func newCollector(c *Controller) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("swml_controller_"+name, help, labels, nil)
	}
	return &collector{
		c:               c,
		sessionsActive:  d("sessions_active", "Jobs installed on the switch."),
		sessionsPending: d("sessions_pending", "Sessions waiting for ranks to register."),
		sessionsTotal:   d("sessions_total", "Jobs started since the controller started."),
		sessionsEnded:   d("sessions_ended_total", "Jobs ended, by reason (end, abort, keepalive_lost, liveness_timeout, idle, replaced, shutdown).", "reason"),
		poolFree:        d("pool_slots_free", "Switch aggregation slots not owned by any job."),
		poolUsed:        d("pool_slots_used", "Switch aggregation slots owned by running jobs."),
		regTimeouts:     d("registration_timeouts_total", "Sessions whose ranks did not all register within the session timeout."),
		syncTimeouts:    d("sync_timeouts_total", "Barrier and Broadcast generations that timed out waiting for workers."),
	}
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.sessionsActive, m.sessionsPending, m.sessionsTotal, m.sessionsEnded, m.poolFree, m.poolUsed, m.regTimeouts, m.syncTimeouts} {
		ch <- d
	}
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	c := m.c
	c.mu.Lock()
	active, pending := len(c.jobs), len(c.pending)
	used := c.pool.InUse()
	st := c.stats
	ended := make(map[string]uint64, len(endReasons))
	for _, r := range endReasons {
		ended[r] = st.endedByReason[r]
	}
	c.mu.Unlock()
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	k := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	g(m.sessionsActive, float64(active))
	g(m.sessionsPending, float64(pending))
	k(m.sessionsTotal, st.sessionsTotal)
	for _, r := range endReasons {
		k(m.sessionsEnded, ended[r], r)
	}
	g(m.poolFree, float64(c.cfg.PoolSize-used))
	g(m.poolUsed, float64(used))
	k(m.regTimeouts, st.registrationTimeouts)
	k(m.syncTimeouts, st.syncTimeouts)
}
