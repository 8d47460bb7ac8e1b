package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/instance"
	"github.com/dbkeeper/dbkeeper/internal/instance/postgres"
	"github.com/dbkeeper/dbkeeper/internal/replication"
)

// Handler serves the agent's HTTP interface (api.go): PathReady to anyone,
// every other path only to the operator (authorize).
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+instance.PathReady, a.serveReady)
	mux.Handle("GET "+instance.PathStatus, a.auth(http.HandlerFunc(a.serveStatus)))
	mux.Handle("PUT "+instance.PathSpec, a.auth(http.HandlerFunc(a.serveSpec)))
	mux.Handle("POST "+instance.PathBackup, a.auth(http.HandlerFunc(a.serveBackupStart)))
	mux.Handle("GET "+instance.PathBackup, a.auth(http.HandlerFunc(a.serveBackupStatus)))
	mux.Handle("POST "+instance.PathRetention, a.auth(http.HandlerFunc(a.serveRetention)))
	return mux
}

// auth refuses a request that does not come from the operator's verified
// client certificate (authorize).
func (a *Agent) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if code, why := authorize(r.TLS); code != 0 {
			http.Error(w, why, code)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *Agent) serveSpec(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var spec instance.Spec
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		http.Error(w, "decoding the Spec: "+err.Error(), http.StatusBadRequest)
		return
	}
	switch spec.Role {
	case instance.RolePrimary, instance.RoleReplica, instance.RoleFenced:
	default:
		http.Error(w, fmt.Sprintf("role %q: want %s, %s or %s", spec.Role, instance.RolePrimary, instance.RoleReplica, instance.RoleFenced), http.StatusBadRequest)
		return
	}
	if err := UpstreamAllowed(spec.Upstream, a.cfg.PodName, a.cfg.Namespace); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := SynchronousAllowed(spec.Synchronous, spec.Role, a.cfg.PodName); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := a.accept(spec, time.Now()); err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, instance.ErrStaleTerm):
			code = http.StatusConflict
		case errors.Is(err, instance.ErrImpossibleTerm):
			code = http.StatusBadRequest
		}
		http.Error(w, err.Error(), code)
		return
	}
	a.kick()
	a.writeStatus(w, r.Context())
}

// accept records spec; a primary's lease starts now. A Spec of a lower
// term than the highest the agent has seen is refused (ErrStaleTerm), and
// so is one of a term it cannot have been sent (ErrImpossibleTerm); a
// higher term is persisted before the Spec is recorded, so that neither
// the answer nor the loop acts on a term a restart would forget.
func (a *Agent) accept(spec instance.Spec, now time.Time) error {
	a.acceptMu.Lock()
	defer a.acceptMu.Unlock()
	a.mu.Lock()
	seen := a.st.Term
	a.mu.Unlock()
	switch checkTerm(seen, spec.Term) {
	case termStale:
		return fmt.Errorf("%w: the Spec's term %d is below term %d, the highest this agent has seen: a late or duplicated request, or one from an operator that is no longer the leader; nothing was changed",
			instance.ErrStaleTerm, spec.Term, seen)
	case termImpossible:
		if seen == 0 {
			return fmt.Errorf("%w: term %d is above %d, the highest any operator produces; nothing was changed", instance.ErrImpossibleTerm, spec.Term, instance.MaxTerm)
		}
		return fmt.Errorf("%w: term %d is %d above term %d, the highest this agent has seen, and an operator raises its term by one per change of primary "+
			"(at most %d while this agent did not answer); nothing was changed", instance.ErrImpossibleTerm, spec.Term, spec.Term-seen, seen, instance.MaxTermJump)
	case termNew:
		a.mu.Lock()
		a.st.Term = spec.Term
		a.mu.Unlock()
		if err := a.saveState(); err != nil {
			// The higher term stays in memory: refusing what is older
			// is safe. The Spec is not recorded.
			return fmt.Errorf("persisting term %d: %w", spec.Term, err)
		}
	}
	if spec.Role == instance.RoleReplica {
		a.mu.Lock()
		raised := a.st.StandbyTerm == nil || *a.st.StandbyTerm < spec.Term
		if raised {
			a.st.StandbyTerm = &spec.Term
		}
		a.mu.Unlock()
		if raised {
			if err := a.saveState(); err != nil {
				return fmt.Errorf("persisting that it is a standby in term %d: %w", spec.Term, err)
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.spec == nil || !reflect.DeepEqual(*a.spec, spec) {
		a.notice = ""
		a.stuck = nil
		a.stuckChecked = time.Time{}
	}
	a.spec = &spec
	a.specGen++
	if spec.Role == instance.RolePrimary {
		if spec.LeaseSeconds > 0 && len(spec.Slots) > 0 {
			a.leaseDeadline = now.Add(time.Duration(spec.LeaseSeconds) * time.Second)
		} else {
			a.leaseDeadline = time.Time{}
		}
	}
	return nil
}

func (a *Agent) serveStatus(w http.ResponseWriter, r *http.Request) {
	a.writeStatus(w, r.Context())
}

func (a *Agent) writeStatus(w http.ResponseWriter, ctx context.Context) {
	s := a.status(ctx)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}

// status builds the Status from the agent's memory and, while the server
// runs, from SQL.
func (a *Agent) status(ctx context.Context) instance.Status {
	now := time.Now()
	a.mu.Lock()
	// Fenced only once the server is down: a fence persisted while the
	// server is still shutting down is not reported yet.
	serverUp := false
	if a.srv != nil {
		select {
		case <-a.srv.Done():
		default:
			serverUp = true
		}
	}
	if a.st.Fenced && !serverUp {
		a.fenceReported = true
	}
	fenced := a.st.Fenced && !serverUp
	phase := a.phase
	if fenced {
		// fence persists the fence before it sets the phase (and a
		// lingering agent exits once a status has reported it): a status
		// that reports the fence says the phase it means.
		phase = instance.PhaseFenced
	}
	s := instance.Status{
		Phase:      phase,
		Fenced:     fenced,
		StoppedLSN: a.st.StoppedLSN,
		Error:      a.lastErr,
		Term:       a.st.Term,
	}
	s.ServerVersion = a.serverVersion
	s.Features = []string{instance.FeatureSynchronous}
	if a.srv != nil {
		s.Synchronous = a.syncApplied
	}
	s.TLS = a.cfg.TLSDir != ""
	if a.tlsFiles != nil {
		s.TLSFiles = a.tlsFiles.digests()
	}
	s.Archiving = a.archivingStatus(now)
	if a.stuck != nil {
		st := *a.stuck
		s.Stuck = &st
	}
	if a.discarded != nil {
		d := *a.discarded
		s.Discarded = &d
	}
	if s.Error == "" {
		s.Error = a.notice
	}
	if a.spec != nil {
		sp := *a.spec
		s.Spec = &sp
		s.Held = holdsOff(a.st, sp)
	}
	running, mode := a.srv != nil, a.mode
	if mode != modePrimary {
		s.Upstream = a.st.Upstream
	}
	streamingUpstream := a.runUpstream
	if !a.lastStreamed.IsZero() {
		ago := now.Sub(a.lastStreamed).Seconds()
		s.LastStreamedSecondsAgo = &ago
	}
	if mode == modePrimary && a.st.HasSlots && !a.leaseDeadline.IsZero() {
		rem := a.leaseDeadline.Sub(now).Seconds()
		s.LeaseRemainingSeconds = &rem
	}
	replies := make(map[string]replySeen, len(a.replies))
	for k, v := range a.replies {
		replies[k] = v
	}
	a.mu.Unlock()

	if !running || s.Phase != instance.PhaseRunning {
		if a.pg.HaveData() {
			s.Timeline = a.pg.StoppedTimeline(ctx)
		}
		return s
	}
	p, err := a.db.Progress(ctx)
	if err != nil {
		// A standby still replaying a backlog refuses connections: it is
		// in recovery for as long as the agent has not promoted it, and
		// must never be taken for a writable server.
		s.InRecovery = mode != modePrimary
		if s.Error == "" {
			s.Error = "querying the server: " + err.Error()
		}
		return s
	}
	s.InRecovery, s.Timeline = p.InRecovery, p.Timeline
	if p.InRecovery {
		s.Timeline = a.standbyTimeline(ctx, p)
	}
	s.ServerVersion = a.noteServerVersion(p.ServerVersion)
	s.ReceiveLSN, s.ReplayLSN, s.CurrentLSN = a.received(p.Receive), p.Replay, p.Current
	s.Streaming = p.InRecovery && p.Streaming && streamingUpstream != ""
	if s.Streaming {
		zero := 0.0
		s.LastStreamedSecondsAgo = &zero
	}
	if p.InRecovery {
		return s
	}
	rows, err := a.db.Slots(ctx)
	if err != nil {
		return s
	}
	for _, r := range rows {
		if !strings.HasPrefix(r.Slot, instance.SlotPrefix) {
			continue
		}
		sb := instance.Standby{Slot: r.Slot, Active: r.Active, Name: r.Name, SentLSN: r.SentLSN, FlushLSN: r.FlushLSN,
			ReplayLSN: r.Replay, LagBytes: r.LagBytes, LagSeconds: r.LagSeconds, WALStatus: r.WALStatus, SyncState: r.SyncState}
		if rs, ok := replies[r.Slot]; ok && !rs.changed.IsZero() {
			ago := now.Sub(rs.changed).Seconds()
			sb.ReplySecondsAgo = &ago
		}
		s.Standbys = append(s.Standbys, sb)
	}
	return s
}

func (a *Agent) serveReady(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	phase, mode, upstream := a.phase, a.mode, a.runUpstream
	var spec *instance.Spec
	if a.spec != nil {
		sp := *a.spec
		spec = &sp
	}
	a.mu.Unlock()
	var p postgres.Progress
	err := errNotRunning
	if phase == instance.PhaseRunning {
		if p, err = a.db.Progress(r.Context()); err == nil {
			a.noteServerVersion(p.ServerVersion)
		}
	}
	ok, reason := readiness(phase, spec, mode, p.InRecovery, err == nil, p.Streaming, upstream)
	if !ok {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	_, _ = fmt.Fprintln(w, reason)
}

var errNotRunning = fmt.Errorf("not running")

// received returns the furthest WAL position the standby has reported
// receiving since the agent started: after a restart of the server (a
// detach, a re-point) pg_last_wal_receive_lsn() is null until the WAL
// receiver streams again, and the replay position catches up only as the
// server replays what it holds, so the furthest position it received would
// otherwise be under-reported to the operator choosing whom to promote.
// The WAL stays in pg_wal: a restart does not lose it.
func (a *Agent) received(now string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	cur, err := replication.ParseLSN(now)
	if err == nil && now != "" && cur >= a.maxReceived {
		a.maxReceived = cur
		return now
	}
	if a.maxReceived == 0 {
		return now
	}
	return a.maxReceived.String()
}

// standbyTimeline is the running standby's timeline from its own
// knowledge: the timeline of the WAL it replayed (ReplayTimeline), or the
// one its WAL receiver receives when that is later (received, not yet
// replayed). Only when the server does not answer IDENTIFY_SYSTEM does it
// fall back to Progress's value, whose control-file timeline may be stale.
func (a *Agent) standbyTimeline(ctx context.Context, p postgres.Progress) uint32 {
	tli, err := a.db.ReplayTimeline(ctx)
	if err != nil {
		return p.Timeline
	}
	if p.Streaming && p.Timeline > tli {
		return p.Timeline
	}
	return tli
}
