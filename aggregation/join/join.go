package join

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/swml-rdma/swml-rdma/aggregation"
	"github.com/swml-rdma/swml-rdma/aggregation/control"
	"github.com/swml-rdma/swml-rdma/aggregation/wire"
	"github.com/swml-rdma/swml-rdma/verbs"
)

// Options are what Join needs: the NIC, the controller, and the switch
// sessions of the job.
type Options struct {
	// NIC is the worker's NIC (OpenNIC).
	NIC NICConfig
	// Controller is the controller's host:port; ConnectTimeout how long to
	// wait for it to accept connections (WaitForController; 0 tries once);
	// TLS and RegistrationToken as control.ClientConfig takes them.
	Controller        string
	ConnectTimeout    time.Duration
	TLS               *control.ClientTLS
	RegistrationToken string
	// Log is told about a controller that is not up yet; nil: nothing.
	Log *slog.Logger
	// Session is the configuration every session starts from (rank,
	// workers, QPs, packet and message size, writes, timeouts, …); Join
	// sets its Device, Controller, SessionID, DType and Wire per session.
	Session aggregation.Config
	// Sessions are the switch sessions to open, in this order: every rank
	// of the job must open the same list in the same order, since each
	// Open waits for every rank of its session.
	Sessions []Session
}

// Session is one switch session of a job.
type Session struct {
	// ID is the switch session id (JobSessions, JobSession16).
	ID uint32
	// DType and Wire are the session's element type and wire width
	// (aggregation.Config.DType, .Wire).
	DType wire.DType
	Wire  int
	// Optional: a switch that cannot sum the session's element width
	// (wire.ErrElementWidth, which it answers every rank alike) leaves
	// the session out — Job.Sessions holds nil for it — instead of failing
	// the join.
	Optional bool
	// Name names the session in errors ("float32", "int32", …).
	Name string
}

// Job is a joined job: the NIC, the controller client and the open
// sessions, each of which the caller all-reduces through.
type Job struct {
	Device verbs.Device
	Client *control.Client
	// Sessions are Options.Sessions' sessions, in their order; nil for an
	// optional one the switch refused.
	Sessions []*aggregation.Session
}

// The stages of a join, as JoinError names them.
const (
	StageNIC        = "nic"        // opening the NIC (OpenNIC)
	StageController = "controller" // reaching the controller
	StageSession    = "session"    // joining a switch session (aggregation.Open)
)

// JoinError is Join's error: the stage that failed and, for a session, which
// one, around the cause. Front ends render it in their own terms (a flag, a
// variable) with what to do.
type JoinError struct {
	Stage   string  // StageNIC, StageController or StageSession
	Session Session // the session that failed (StageSession)
	Err     error
}

func (e *JoinError) Error() string {
	if e.Stage == StageSession {
		return fmt.Sprintf("join: %s session %#x: %v", e.Session.Name, e.Session.ID, e.Err)
	}
	return fmt.Sprintf("join: %s: %v", e.Stage, e.Err)
}

func (e *JoinError) Unwrap() error { return e.Err }

// Join joins a job: it opens the NIC, waits for the controller, and opens
// Options.Sessions in order. On failure it aborts the sessions it opened
// (so the other ranks fail at once instead of at their timeouts), closes the
// client and the NIC, and returns a *JoinError. The Job is the caller's to
// Close or Abort.
func Join(ctx context.Context, o Options) (*Job, error) {
	dev, err := OpenNIC(o.NIC)
	if err != nil {
		return nil, &JoinError{Stage: StageNIC, Err: err}
	}
	if err := WaitForController(ctx, o.Controller, o.ConnectTimeout, o.Log); err != nil {
		dev.Close()
		return nil, &JoinError{Stage: StageController, Err: err}
	}
	cli, err := control.NewClient(control.ClientConfig{Addr: o.Controller, TLS: o.TLS, RegistrationToken: o.RegistrationToken})
	if err != nil {
		dev.Close()
		return nil, &JoinError{Stage: StageController, Err: err}
	}
	j := &Job{Device: dev, Client: cli}
	for _, s := range o.Sessions {
		cfg := o.Session
		cfg.Device, cfg.Controller, cfg.SessionID, cfg.DType, cfg.Wire = dev, cli, s.ID, s.DType, s.Wire
		sess, err := aggregation.Open(ctx, cfg)
		if err != nil && s.Optional && errors.Is(err, wire.ErrElementWidth) {
			sess, err = nil, nil
		}
		if err != nil {
			_ = j.Abort(err.Error()) // err is the one to report
			return nil, &JoinError{Stage: StageSession, Session: s, Err: err}
		}
		j.Sessions = append(j.Sessions, sess)
	}
	return j, nil
}

// Close ends every session cleanly, then closes the client and the NIC.
func (j *Job) Close() error { return j.end("") }

// Abort aborts every session with reason (the other ranks fail at once,
// naming it), then closes the client and the NIC.
func (j *Job) Abort(reason string) error {
	if reason == "" {
		reason = "aborted"
	}
	return j.end(reason)
}

func (j *Job) end(reason string) error {
	var errs []error
	for _, s := range j.Sessions {
		if s == nil {
			continue
		}
		if reason != "" {
			errs = append(errs, s.Abort(reason))
		} else {
			errs = append(errs, s.Close())
		}
	}
	errs = append(errs, j.Client.Close(), j.Device.Close())
	return errors.Join(errs...)
}
