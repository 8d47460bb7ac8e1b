package controller

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestResolveRecoverySource(t *testing.T) {
	source := fixture.Defaulted(fixture.Database("orders-old", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithBackup()))
	ownStore := fixture.Store()
	ownStore.Path = source.Namespace
	given := fixture.Store()
	given.Path = "shop/2025"
	foreign := fixture.Store()
	foreign.Path = "bank"
	for _, tc := range []struct {
		name   string
		db     *dbv1.Database
		source *dbv1.Database
		allow  bool
		want   *dbv1.RecoverySource
		reason string
		msg    string
	}{
		{name: "a Database without recovery resolves to nothing",
			db: fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres))},
		{name: "a source Database resolves to its store and its name",
			db: fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithRecoveryFrom("orders-old")), source: source,
			want: &dbv1.RecoverySource{ObjectStore: &ownStore, ServerName: "orders-old"}},
		{name: "a store given explicitly resolves to itself, whatever Database exists",
			db:     fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithRecoveryFromStore("shop/2025", "orders-2025")),
			source: source, want: &dbv1.RecoverySource{ObjectStore: &given, ServerName: "orders-2025"}},
		{name: "a store of another namespace's directory is refused, as admission refuses it",
			db:     fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithRecoveryFromStore("bank", "ledger")),
			reason: dbv1.ReasonStoreOutsideNamespace,
			msg:    `spec.bootstrap.recovery.source.objectStore.path "bank" lies outside namespace "shop": a Database restores only from its own namespace's directory`},
		{name: "a store of another namespace's directory, allowed by the operator",
			db:    fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithRecoveryFromStore("bank", "ledger")),
			allow: true, want: &dbv1.RecoverySource{ObjectStore: &foreign, ServerName: "ledger"}},
		{name: "a missing source Database says how to name a deleted one's store",
			db:     fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithRecoveryFrom("orders-old")),
			reason: dbv1.ReasonRecoverySourceNotFound,
			msg:    `spec.bootstrap.recovery.source.database: Database "orders-old" does not exist in namespace "shop": create it, or, for a source that was deleted, recreate this Database with source.objectStore set to the store it wrote to and source.serverName "orders-old"`},
		{name: "a source Database without spec.backup has nothing to restore",
			db:     fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithRecoveryFrom("orders-old")),
			source: fixture.Database("orders-old", fixture.WithEngine(dbv1.EnginePostgres)),
			reason: dbv1.ReasonRecoverySourceNotFound, msg: `Database "orders-old" has no spec.backup`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, p := resolveRecoverySource(tc.db, tc.source, tc.allow)
			if tc.reason != "" {
				if p == nil || p.reason != tc.reason || !strings.Contains(p.message, tc.msg) {
					t.Fatalf("problem = %+v, want %s containing %q", p, tc.reason, tc.msg)
				}
				return
			}
			if p != nil {
				t.Fatalf("problem %+v", p)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	t.Run("the resolved store is a copy: the source's later changes do not reach it", func(t *testing.T) {
		db := fixture.Database("orders", fixture.WithEngine(dbv1.EnginePostgres), fixture.WithRecoveryFrom("orders-old"))
		src := source.DeepCopy()
		got, _ := resolveRecoverySource(db, src, false)
		src.Spec.Backup.ObjectStore.Bucket = "elsewhere"
		if got.ObjectStore.Bucket != fixture.StoreBucket {
			t.Errorf("the resolved store followed the source's change: %q", got.ObjectStore.Bucket)
		}
	})
}

func TestMissingSecretsProblem(t *testing.T) {
	st := fixture.Store()
	st.CASecret = &dbv1.SecretKeyReference{Name: "store-ca", Key: "ca.crt"}
	src := &dbv1.RecoverySource{ObjectStore: &st, ServerName: "orders-old"}
	if got := recoverySecrets(&st); !reflect.DeepEqual(got, []string{"store-credentials", "store-ca"}) {
		t.Errorf("recoverySecrets = %q", got)
	}
	if p := missingSecretsProblem(src, "shop", nil); p != nil {
		t.Errorf("no Secret missing: %+v", p)
	}
	p := missingSecretsProblem(src, "shop", []string{"store-credentials", "store-ca"})
	want := `the store of the recovery source "orders-old" names Secret(s) store-credentials, store-ca that do not exist in namespace "shop": the restore reads the store with them; copy them into this namespace`
	if p == nil || p.reason != dbv1.ReasonRecoverySecretNotFound || p.message != want {
		t.Errorf("problem = %+v, want %s: %s", p, dbv1.ReasonRecoverySecretNotFound, want)
	}
}

func TestRecoveryFailedProblem(t *testing.T) {
	terminated := func(msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "postgres", RestartCount: 3, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: msg}}}
	}
	for _, tc := range []struct {
		name string
		cs   corev1.ContainerStatus
		want string
	}{
		{"the agent's last line names the earliest recoverable point",
			terminated("listening on :8008\ndbkeeper-instance: recovery failed: choosing a backup for time=2026-11-30T00:00:00Z: the target time 2026-11-30T00:00:00Z lies before the earliest recoverable point, Tue Dec  1 03:00:12 2026 UTC (the end of the oldest backup, 20261201T030000, LSN 0/3000100): choose a target after it\n"),
			"pod orders-0: the restore from the recovery source failed, the data directory is left empty and the restore is retried (3 restarts): choosing a backup for time=2026-11-30T00:00:00Z: the target time 2026-11-30T00:00:00Z lies before the earliest recoverable point, Tue Dec  1 03:00:12 2026 UTC (the end of the oldest backup, 20261201T030000, LSN 0/3000100): choose a target after it"},
		{"another crash is not a failed restore", terminated("FATAL: invalid value for parameter"), ""},
		{"an earlier line does not count: the restore may have succeeded since", terminated("dbkeeper-instance: recovery failed: x\nFATAL: invalid value"), ""},
		{"no termination yet", corev1.ContainerStatus{Name: "postgres"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := recoveryFailed("orders-0", tc.cs)
			switch {
			case tc.want == "" && p != nil:
				t.Errorf("problem %+v, want none", p)
			case tc.want != "" && (p == nil || p.reason != dbv1.ReasonRecoveryFailed || p.message != tc.want):
				t.Errorf("problem = %+v\nwant %s: %s", p, dbv1.ReasonRecoveryFailed, tc.want)
			}
		})
	}
}
