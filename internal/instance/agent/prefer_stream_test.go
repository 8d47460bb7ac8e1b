package agent

import (
	"io"
	"log"
	"path/filepath"
	"testing"
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// TestAStandbyNotStreamingAsksItsPrimaryForTheNextSegment: the real node's
// backups scenario showed a standby that followed its new primary for
// minutes without streaming, restoring each segment from the store as the
// primary filled it (16 s a fetch, a segment every 15 s). The agent asks
// that the next segment come from the primary once the standby has not
// streamed for preferStreamAfter, and again every preferStreamAfter while
// it does not; never while it streams, nor without the backup sidecar.
func TestAStandbyNotStreamingAsksItsPrimaryForTheNextSegment(t *testing.T) {
	const up, seg = "db-0.db-headless", "00000003000000000000000C"
	spec := instance.Spec{Role: instance.RoleReplica, Upstream: up, Slot: "s"}
	newAgent := func(socket string, since time.Duration, streaming bool) *Agent {
		a := &Agent{log: log.New(io.Discard, "", 0)}
		a.cfg.ArchiverSocket = socket
		a.mode, a.runUpstream, a.streamingNow = modeStandby, up, streaming
		a.standbySince = time.Now().Add(-since)
		return a
	}
	socket := filepath.Join(t.TempDir(), ".s.dbkeeper-archiver")

	a := newAgent(socket, 5*time.Second, false)
	a.preferStreaming(true, spec)
	if archiver.TakeStreamNext(socket, seg) {
		t.Error("asked after 5 s without streaming, want after preferStreamAfter")
	}
	a.standbySince = time.Now().Add(-preferStreamAfter)
	a.preferStreaming(true, spec)
	if !archiver.TakeStreamNext(socket, seg) {
		t.Fatal("not asked after preferStreamAfter without streaming")
	}
	a.preferStreaming(true, spec)
	if archiver.TakeStreamNext(socket, seg) {
		t.Error("asked again at once, want after preferStreamAfter")
	}
	a.streamAsked = time.Now().Add(-preferStreamAfter)
	a.preferStreaming(true, spec)
	if !archiver.TakeStreamNext(socket, seg) {
		t.Error("not asked again preferStreamAfter later, still not streaming")
	}

	for name, a := range map[string]*Agent{
		"streaming":           newAgent(socket, time.Minute, true),
		"without the sidecar": newAgent("", time.Minute, false),
	} {
		a.preferStreaming(true, spec)
		if archiver.TakeStreamNext(socket, seg) {
			t.Errorf("%s: asked", name)
		}
	}
	other := newAgent(socket, time.Minute, false)
	other.preferStreaming(true, instance.Spec{Role: instance.RoleReplica, Upstream: "db-1.db-headless"})
	if archiver.TakeStreamNext(socket, seg) {
		t.Error("asked while the Spec names another upstream (a restart follows)")
	}
}
