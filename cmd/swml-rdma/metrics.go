package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// newMetricsRegistry returns a fresh registry (never the global one) with
// the Go runtime and process collectors; the commands add their own.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// metricsServer serves a registry at /metrics over HTTP.
type metricsServer struct {
	srv  *http.Server
	addr net.Addr
	done chan struct{}
	once sync.Once
}

// startMetricsServer listens on addr (host:port; port 0 picks one) and
// serves reg at /metrics until Close. flag names the flag addr came from,
// for the error message.
func startMetricsServer(flag, addr string, reg *prometheus.Registry, log *slog.Logger) (*metricsServer, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, listenError(flag, addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "swml-rdma: Prometheus metrics at /metrics")
	})
	m := &metricsServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr: lis.Addr(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(m.done)
		if err := m.srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server stopped", "addr", m.addr.String(), "err", err)
		}
	}()
	log.Info("metrics serving", "metrics", "http://"+m.addr.String()+"/metrics")
	return m, nil
}

// Addr is the bound address (with the port picked for port 0).
func (m *metricsServer) Addr() string { return m.addr.String() }

// Close stops the server, letting a scrape in flight finish (at most 2 s).
// Nil-safe and idempotent.
func (m *metricsServer) Close() {
	if m == nil {
		return
	}
	m.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if m.srv.Shutdown(ctx) != nil {
			m.srv.Close()
		}
		<-m.done
	})
}

// listenError explains a failed TCP listen on a flag's address.
func listenError(flag, addr string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return fmt.Errorf("--%s %s: address already in use: another process (another swml-rdma?) listens there; stop it or pick a free port, e.g. --%s 127.0.0.1:0", flag, addr, flag)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return fmt.Errorf("--%s %s: the address is not configured on any interface of this host; give one of its addresses (127.0.0.1 for loopback)", flag, addr)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("--%s %s: permission denied: ports below 1024 need root; pick a port above 1024", flag, addr)
	}
	return fmt.Errorf("--%s %s: listen: %w (give host:port, e.g. 127.0.0.1:9100)", flag, addr, err)
}
