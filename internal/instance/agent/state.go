package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// persisted is what the agent remembers across restarts, in the state file
// (EnvStateFile) on the data volume, outside PGDATA.
type persisted struct {
	// Role is what the data directory last ran as: RolePrimary from its
	// initialization or promotion until a clean demotion, RoleReplica
	// otherwise. A data directory whose Role is primary was not demoted
	// cleanly and must be rewound before it follows another primary.
	Role instance.Role `json:"role,omitempty"`
	// HasSlots is true when, as a primary, it was told to keep standby
	// slots: it is then not a single server and never restarts writable on
	// its own.
	HasSlots bool `json:"hasSlots,omitempty"`
	// Fenced is true from a fence until a Spec makes the server a primary
	// or a standby again.
	Fenced bool `json:"fenced,omitempty"`
	// Term is the highest fencing term the agent has seen in a Spec
	// (Spec.Term): a Spec of a lower term is refused. It is written before
	// the PUT that raised it is answered.
	Term int64 `json:"term,omitempty"`
	// FencedTerm is Term at the last fence: only a primary Spec of a
	// higher term makes the fenced server a primary again.
	FencedTerm int64 `json:"fencedTerm,omitempty"`
	// StandbyTerm is the highest term of a replica Spec the agent accepted,
	// nil when none: told in that term to be a standby, the server becomes
	// a primary only through a primary Spec of a later term, so a primary
	// Spec of that term arriving late (a lease renewal from before a
	// switchover demoted it) cannot make it writable next to the new
	// primary. It is written before the PUT is answered.
	StandbyTerm *int64 `json:"standbyTerm,omitempty"`
	// Reclone is the last Spec.Reclone the agent acted on: each distinct
	// value authorises one re-clone.
	Reclone string `json:"reclone,omitempty"`
	// Upstream and Slot are what the standby last followed; Detached is
	// true when it was told to follow nothing.
	Upstream string `json:"upstream,omitempty"`
	Slot     string `json:"slot,omitempty"`
	Detached bool   `json:"detached,omitempty"`
	// StoppedLSN is the shutdown checkpoint of the last clean demotion,
	// "" once the server is made a primary again.
	StoppedLSN string `json:"stoppedLSN,omitempty"`
	// Initializing is true from the start of ordinal 0's initialization
	// until its server first answered: an interrupted initialization is
	// started again, and nothing else is ever initialized twice.
	Initializing bool `json:"initializing,omitempty"`
	// Restoring is true from the start of ordinal 0's restore
	// (EnvRecoveryTarget) until its server was promoted at the target: an
	// interrupted restore is resumed (or, with an empty data directory,
	// started again), and the data directory is never initialized.
	Restoring bool `json:"restoring,omitempty"`
}

// readState reads the state file; ok is false when there is none.
func readState(path string) (st persisted, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return persisted{}, false, nil
	}
	if err != nil {
		return persisted{}, false, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return persisted{}, false, fmt.Errorf("state file %s: %w", path, err)
	}
	return st, true, nil
}

// writeState replaces the state file atomically: a temporary file in the
// same directory, synced, then renamed over it, then the directory synced.
func writeState(path string, st persisted) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".dbkeeper-state-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }()
	if _, err := f.Write(append(data, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
