package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/archiver"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
	"github.com/dbkeeper/dbkeeper/internal/test/process"
	"github.com/dbkeeper/dbkeeper/internal/test/promrun"
	"github.com/dbkeeper/dbkeeper/internal/test/testenv"
)

// testStore is devcluster's object store as the test drives it.
type testStore interface {
	Endpoint() string
	Stop(t testing.TB)
	Start(t testing.TB)
	// WALNames lists the WAL files archived for server under path.
	WALNames(t testing.TB, path, server string) []string
}

// shop is the replicated Database of testBackup, archived to devcluster's
// object store.
const shop = "shop"

// backupRun is what the steps of testBackup hand on to each other.
type backupRun struct {
	w *writer
	// target lies between the commits of rows k and the next one, after
	// the failover.
	target time.Time
	k      int
	acked  []int
	// failoverLost are the rows the old primary acknowledged that its
	// standbys had not received when it was cut off: asynchronous
	// replication loses them with the failover (docs/replication.md,
	// "Asynchronous loss"), and no archive can hold them.
	failoverLost map[int]bool
}

// testBackup runs issue 22's scenario on the real node with devcluster's
// object store: a 3-replica postgres 15 Database archives continuously
// through a switchover, a failover and an outage of the store, is deleted
// with its volumes, and is restored to a moment between two rows and to its
// last commit; a single postgres 17 Database backs up and prunes by
// retention.
func (s *suite) testBackup(t subtest) {
	const name = shop
	step := s.steps(t, name)
	run := &backupRun{}
	store := s.objectStore(t)
	s.storeUsers.use(t)

	image := s.image("dbkeeper.local/postgres:15.")
	s.apply(withBackup(strings.Replace(database(name, "postgres", "15", image, "Delete", map[string]string{"archive_timeout": "15s"}),
		"  deletionPolicy:", "  replicas: 3\n  failoverTimeout: 10s\n  deletionPolicy:", 1), store.Endpoint()))
	took := s.waitReady(name, 6*time.Minute)
	t.Logf("3-replica postgres with backups: apply to Ready in %.1fs", took.Seconds())

	// The writer runs through the steps: it stops with the scenario, not
	// with the step that started it.
	rw := s.pgTarget(name, name)
	rw.exec(t, "CREATE TABLE ledger (n int PRIMARY KEY, at timestamptz DEFAULT now())")
	run.w = startWriter(t, rw, 1)

	step("continuous archiving is reported and an on-demand Backup completes", func(t subtest) {
		s.waitArchiving(t, name, metav1.ConditionTrue, 2*time.Minute)
		b := s.backupOf(t, name, name+"-first", 3*time.Minute)
		t.Logf("backup %s: %s to %s (%v), WAL %s to %s", b.Name, b.Status.StartedAt, b.Status.StoppedAt,
			b.Status.StoppedAt.Sub(b.Status.StartedAt.Time), b.Status.BeginWAL, b.Status.EndWAL)
		// The Database's status follows the Backup's in a write of its own.
		testenv.Eventually(t, 30*time.Second, "status.backup naming the backup", func() string {
			if st := s.database(t, name).Status.Backup; st == nil || st.LastSuccessfulBackup == "" || st.FirstRecoverabilityPoint == nil {
				return fmt.Sprintf("status.backup = %+v, want the last successful backup and the first recoverability point", st)
			}
			return ""
		})
	})

	step("a switchover and a failover while the writer runs", func(t subtest) {
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"primary":"`+name+`-1"}}`)
		s.waitPrimary(t, name, name+"-1", 2*time.Minute)
		run.w.waitWrites(t, 5, time.Minute)
		// Every standby streams from the new primary before it is cut
		// off: a candidate must have streamed from it.
		s.waitReady(name, 3*time.Minute)
		s.mustKubectl("patch", "database", "-n", ns, name, "--type=merge", "-p", `{"spec":{"primary":""}}`)
		old := s.primaryOf(t, name)
		heal := s.isolate(t, old)
		screens := s.watchStatus(t, name, "!! SwitchingOver")
		newPrimary := s.waitNewPrimary(t, name, old, 3*time.Minute)
		if screen := screens(); screen == "" {
			t.Errorf("kubectl dbkeeper status never showed the failover under way (a SwitchingOver problem)")
		} else {
			t.Logf("kubectl dbkeeper status %s in the middle of the failover:\n%s", name, screen)
		}
		run.w.waitWrites(t, 10, time.Minute)
		// The target: just after a row acknowledged on the new timeline.
		// The next row is sent 20 ms after that acknowledgement, so its
		// commit is later than the target.
		nums, at := run.w.acknowledged()
		run.k, run.target = nums[len(nums)-5], at[len(at)-5].Add(5*time.Millisecond)
		t.Logf("failover %s → %s; restore target %s, after row %d", old, newPrimary, run.target.Format(time.RFC3339Nano), run.k)
		// What the failover lost, as the new primary has it: the archive
		// must hold every other acknowledged row.
		var live map[int]bool
		testenv.Eventually(t, time.Minute, "reading the rows through the new primary", func() string {
			var err error
			if live, err = rw.numbers(); err != nil {
				return err.Error()
			}
			return ""
		})
		run.failoverLost = map[int]bool{}
		for _, n := range nums {
			if !live[n] {
				run.failoverLost[n] = true
			}
		}
		t.Logf("failover: %d acknowledged rows lost (asynchronous replication): %v", len(run.failoverLost), sortedKeys(run.failoverLost))
		heal()
		s.waitReady(name, 4*time.Minute)
		s.checkRoles(t, name, newPrimary)
		run.w.waitWrites(t, 10, time.Minute)
	})

	step("an outage of the object store: ContinuousArchiving False within 30 s, True after it returns, no gap", func(t subtest) {
		// Not while another scenario backs up to it.
		asked := time.Now()
		s.storeUsers.wait(1)
		if waited := time.Since(asked); waited > time.Second {
			t.Logf("waited %v for the other scenarios using the object store", waited.Round(time.Second))
		}
		store.Stop(t)
		began := time.Now()
		s.psqlIn(t, s.primaryOf(t, name), "SELECT pg_switch_wal()")
		s.waitArchiving(t, name, metav1.ConditionFalse, 30*time.Second)
		t.Logf("ContinuousArchiving False %v after the store stopped: %s", time.Since(began).Round(time.Millisecond), s.condition(name, dbv1.ConditionContinuousArchiving).Message)
		// Within the outage's minute: devcluster's Prometheus sees the
		// archiving alert's expression select the Database, and every
		// query of the dashboard answers for it (its backups, a
		// switchover and a failover, archiving failing).
		failing := map[string]string{"namespace": ns, "database": name}
		s.waitSelected(t, "DbkeeperArchivingFailing's expression", alertExpr(t, "DbkeeperArchivingFailing"),
			failing, max(20*time.Second, time.Until(began.Add(45*time.Second))))
		// The rule itself, as Prometheus loaded it, is pending at its
		// next evaluation (5 s); it would fire after its for: of 5
		// minutes, which the scenario does not wait for.
		s.waitSelected(t, "DbkeeperArchivingFailing pending", `ALERTS{alertname="DbkeeperArchivingFailing"}`, failing, 15*time.Second)
		if alerts, err := promrun.Query(t.Context(), s.prometheus(t), `ALERTS{namespace="`+ns+`"}`); err == nil {
			t.Logf("the alerts of namespace %s pending or firing with the store stopped: %v", ns, alerts)
		}
		screen, _ := s.kubectlDbkeeper(t, "status", name, "-n", ns)
		t.Logf("kubectl dbkeeper status %s with the store stopped:\n%s", name, screen)
		if !strings.Contains(screen, "!! ContinuousArchiving") {
			t.Errorf("kubectl dbkeeper status with the store stopped shows no ContinuousArchiving problem")
		}
		s.checkDashboard(t, name)
		time.Sleep(time.Until(began.Add(60 * time.Second)))
		store.Start(t)
		returned := time.Now()
		s.psqlIn(t, s.primaryOf(t, name), "SELECT pg_switch_wal()")
		s.waitArchiving(t, name, metav1.ConditionTrue, 2*time.Minute)
		t.Logf("ContinuousArchiving True %v after the store returned", time.Since(returned).Round(time.Millisecond))
	})

	step("deleted with its volumes, restored to a moment between two rows and to the last commit", func(t subtest) {
		run.acked, _ = run.w.stop()
		// The last rows reach the store: close the segment they are in.
		primary := s.primaryOf(t, name)
		s.psqlIn(t, primary, "INSERT INTO ledger (n) VALUES (-1)")
		last := s.psqlIn(t, primary, "SELECT pg_walfile_name(pg_current_wal_lsn())")
		s.psqlIn(t, primary, "SELECT pg_switch_wal()")
		testenv.Eventually(t, 3*time.Minute, "segment "+last+" archived", func() string {
			if st := s.database(t, name).Status.Backup; st == nil || st.LastArchivedWAL < last {
				return fmt.Sprintf("status.backup %+v", st)
			}
			return ""
		})
		if gaps := archiver.Gaps(store.WALNames(t, ns, name), 16<<20); len(gaps) > 0 {
			t.Errorf("the archive of %s misses segments %v", name, gaps)
		}
		s.mustKubectl("delete", "database", "-n", ns, name, "--wait=true", "--timeout=180s")
		testenv.Eventually(t, 2*time.Minute, "the claims of "+name+" are deleted", func() string {
			if out, _ := s.kubectl("get", "pvc", "-n", ns, "-l", "app.kubernetes.io/instance="+name, "-o", "name"); out != "" {
				return "claims left: " + out
			}
			return ""
		})

		restore := func(db, target string) []int {
			recovery := "  bootstrap:\n    recovery:\n      source:\n        serverName: " + name + "\n        objectStore:\n" +
				storeYAML(store.Endpoint(), "          ")
			if target != "" {
				recovery += "      targetTime: " + target + "\n"
			}
			began := time.Now()
			s.apply(strings.Replace(database(db, "postgres", "15", image, "Delete", nil), "  deletionPolicy:", recovery+"  deletionPolicy:", 1))
			s.waitRestored(t, db, 5*time.Minute)
			t.Logf("restore of %s to %q into %s: Ready after %v", name, target, db, time.Since(began).Round(time.Millisecond))
			var got map[int]bool
			testenv.Eventually(t, time.Minute, "reading "+db, func() string {
				var err error
				if got, err = s.pgTarget(db, db).numbers(); err != nil {
					return err.Error()
				}
				return ""
			})
			return sortedKeys(got)
		}

		got := restore(name+"-pitr", run.target.UTC().Format(time.RFC3339Nano))
		var missing, extra []int
		for _, n := range run.acked {
			if n <= run.k && !run.failoverLost[n] && !slices.Contains(got, n) {
				missing = append(missing, n)
			}
		}
		for _, n := range got {
			if n > run.k {
				extra = append(extra, n)
			}
		}
		if len(missing) > 0 || len(extra) > 0 {
			t.Errorf("restored to %s (after row %d): acknowledged rows up to %d missing %v, rows after it present %v",
				run.target.Format(time.RFC3339Nano), run.k, run.k, missing, extra)
		}

		got = restore(name+"-latest", "")
		missing = nil
		for _, n := range run.acked {
			if !run.failoverLost[n] && !slices.Contains(got, n) {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			t.Errorf("restored to the last commit: %d of %d acknowledged rows missing: %v", len(missing), len(run.acked), missing)
		}
		for _, db := range []string{name + "-pitr", name + "-latest"} {
			s.mustKubectl("delete", "database", "-n", ns, db, "--wait=false")
		}
	})
}

// testBackupRetention runs a single postgres 17 Database with backups
// that keep one base backup: a second backup prunes the first, and a
// restore to a time before the one kept is refused, naming the first
// recoverable point.
func (s *suite) testBackupRetention(t subtest) {
	const name = "till"
	store := s.objectStore(t)
	s.storeUsers.use(t)
	s.apply(withBackup(database(name, "postgres", "17", s.image("dbkeeper.local/postgres:17."), "Delete", nil), store.Endpoint(), "keepBackups: 1"))
	s.waitReady(name, 3*time.Minute)
	s.waitArchiving(t, name, metav1.ConditionTrue, 2*time.Minute)
	first := s.backupOf(t, name, name+"-first", 3*time.Minute)
	second := s.backupOf(t, name, name+"-second", 3*time.Minute)
	t.Logf("postgres 17: backups %s (%v) and %s (%v)", first.Name, first.Status.StoppedAt.Sub(first.Status.StartedAt.Time),
		second.Name, second.Status.StoppedAt.Sub(second.Status.StartedAt.Time))
	testenv.Eventually(t, time.Minute, "the first backup pruned", func() string {
		st := s.database(t, name).Status.Backup
		if st == nil || st.FirstRecoverabilityPoint == nil || st.FirstRecoverabilityPoint.Before(second.Status.StartedAt) {
			return fmt.Sprintf("status.backup %+v, want the first recoverable point at or after %s", st, second.Status.StartedAt)
		}
		if out, _ := s.kubectl("get", "backup", "-n", ns, first.Name, "--ignore-not-found", "-o", "name"); out != "" {
			return "Backup " + first.Name + " remains"
		}
		return ""
	})
	first2 := s.database(t, name).Status.Backup.FirstRecoverabilityPoint
	// A restore to the moment the pruned backup ended is refused at once.
	target := first.Status.StoppedAt.UTC().Format(time.RFC3339)
	manifest := strings.Replace(database(name+"-early", "postgres", "17", s.image("dbkeeper.local/postgres:17."), "Delete", nil), "  deletionPolicy:",
		"  bootstrap:\n    recovery:\n      source:\n        database: "+name+"\n      targetTime: "+target+"\n  deletionPolicy:", 1)
	file := filepath.Join(s.runDir, name+"-early.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := s.kubectl("apply", "-f", file)
	want := fmt.Sprintf("spec.bootstrap.recovery.targetTime: Invalid value: %q: is before %s, the first moment the backups of %s can restore to",
		target, first2.UTC().Format(time.RFC3339), name)
	if err == nil || !strings.Contains(out, want) {
		t.Errorf("kubectl apply of a restore to %s: %v\n%s\nwant the refusal %q", target, err, out, want)
	}
	s.mustKubectl("delete", "database", "-n", ns, name, "--wait=false")
}

// steps returns the function that runs one step of a scenario on the
// Database name as a subtest of t: a failed step logs the pods then, since
// a later step replaces them; the scenario logs them only for a failure of
// its own, before any step.
func (s *suite) steps(t subtest, name string) func(title string, f func(t subtest)) {
	stepFailed := false
	t.Cleanup(func() {
		if !stepFailed {
			s.dumpReplicationOnFailure(t, name)
		}
	})
	return func(title string, f func(t subtest)) {
		s.run(t.T, title, name, func(t subtest) {
			t.Cleanup(func() {
				stepFailed = stepFailed || t.Failed()
				s.dumpReplicationOnFailure(t, name)
			})
			f(t)
		})
	}
}

// withBackup adds spec.backup with devcluster's store, and the fields
// of spec.backup given as lines such as "keepBackups: 1", to a Database
// manifest.
func withBackup(manifest, endpoint string, fields ...string) string {
	b := "  backup:\n    objectStore:\n" + storeYAML(endpoint, "      ")
	for _, f := range fields {
		b += "    " + f + "\n"
	}
	return strings.Replace(manifest, "  deletionPolicy:", b+"  deletionPolicy:", 1)
}

// storeYAML is devcluster's object store as spec.backup.objectStore says
// it, each line indented by indent.
func storeYAML(endpoint, indent string) string {
	lines := []string{
		"endpoint: " + endpoint,
		"bucket: " + devcluster.ObjectStoreBucket,
		"path: " + ns,
		"credentialsSecret: {name: " + devcluster.ObjectStoreCredentialsSecret + "}",
		"caSecret: {name: " + devcluster.ObjectStoreCASecret + "}",
	}
	return indent + strings.Join(lines, "\n"+indent) + "\n"
}

// waitArchiving waits until the Database's ContinuousArchiving condition
// has status want.
func (s *suite) waitArchiving(t testing.TB, name string, want metav1.ConditionStatus, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, "ContinuousArchiving "+string(want), func() string {
		if c := s.condition(name, dbv1.ConditionContinuousArchiving); c.Status != want {
			return fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
		return ""
	})
}

// waitRestored waits until a restored Database is Ready, failing at once
// when its restore failed (Stalled RecoveryFailed).
func (s *suite) waitRestored(t testing.TB, name string, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, name+" restored and Ready", func() string {
		if c := s.condition(name, dbv1.ConditionStalled); c.Status == metav1.ConditionTrue {
			t.Fatalf("%s is Stalled: %s: %s", name, c.Reason, c.Message)
		}
		if c := s.condition(name, dbv1.ConditionReady); c.Status != metav1.ConditionTrue {
			return fmt.Sprintf("Ready %s %s: %s", c.Status, c.Reason, c.Message)
		}
		return ""
	})
}

// backupOf applies a Backup of the Database and waits until it completed.
func (s *suite) backupOf(t testing.TB, db, name string, timeout time.Duration) *dbv1.Backup {
	t.Helper()
	s.apply(fmt.Sprintf("apiVersion: dbkeeper.io/v1alpha1\nkind: Backup\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  database: %s\n", name, ns, db))
	b := &dbv1.Backup{}
	testenv.Eventually(t, timeout, "Backup "+name+" completed", func() string {
		if err := s.client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, b); err != nil {
			return err.Error()
		}
		switch b.Status.Phase {
		case dbv1.BackupPhaseCompleted:
			return ""
		case dbv1.BackupPhaseFailed:
			t.Fatalf("Backup %s failed: %s", name, b.Status.Error)
		}
		return fmt.Sprintf("phase %q", b.Status.Phase)
	})
	return b
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// devclusterStore is devcluster's object store, as the test drives it.
type devclusterStore struct{ c *devcluster.Cluster }

func (d devclusterStore) Endpoint() string { return devcluster.ObjectStoreEndpoint }

func (d devclusterStore) Stop(t testing.TB) {
	t.Helper()
	if err := d.c.StopObjectStore(); err != nil && !errors.Is(err, process.ErrKilled) {
		t.Fatal(err)
	}
}

func (d devclusterStore) Start(t testing.TB) {
	t.Helper()
	if err := d.c.StartObjectStore(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// WALNames lists the files under the server's wals directory of the
// store's bucket, from the store's own directory.
func (d devclusterStore) WALNames(t testing.TB, path, server string) []string {
	t.Helper()
	var names []string
	root := filepath.Join(d.c.ObjectStoreDir(), devcluster.ObjectStoreBucket, path, server, "wals")
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			names = append(names, e.Name())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// objectStore is devcluster's object store, with its Secrets in the test
// namespace.
func (s *suite) objectStore(t testing.TB) testStore {
	t.Helper()
	if err := s.env.Cluster.CreateObjectStoreSecrets(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	return devclusterStore{c: s.env.Cluster}
}
