package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// op is one change a client makes to the Databases of a workload.
type op struct {
	kind  string // "create", "update" or "delete"
	db    int
	patch string // the JSON merge patch of an update
	what  string
	// set applies the update to the Database's intent.
	set func(*intent)
}

// intent is what a workload means a Database to be in the end.
type intent struct {
	name     string
	engine   dbv1.Engine
	policy   dbv1.DeletionPolicy
	replicas int32
	// connections is spec.parameters' max_connections, "" for none.
	connections string
	cpu         string
	size        string
	deleted     bool
}

// workload is a seeded sequence of creates, updates (parameters, resources,
// storage growth) and deletes of n Databases in a namespace.
type workload struct {
	namespace string
	dbs       []*intent
	ops       []op
}

// newWorkload returns n Databases, half of them Retain and half Delete,
// each updated once or twice, a fifth of them deleted at the end of their
// updates; the order is random, but a Database is updated only after it is
// created and deleted only after its updates. updates false leaves only the
// creates.
func newWorkload(rnd *rand.Rand, namespace string, n int, updates bool) *workload {
	w := &workload{namespace: namespace}
	pending := make([][]op, n)
	doomed := map[int]bool{}
	for i := range n {
		d := &intent{
			name:     fmt.Sprintf("db%02d", i),
			engine:   []dbv1.Engine{dbv1.EnginePostgres, dbv1.EngineMySQL}[rnd.IntN(2)],
			policy:   []dbv1.DeletionPolicy{dbv1.DeletionPolicyRetain, dbv1.DeletionPolicyDelete}[i%2],
			replicas: 1, cpu: "100m", size: "1Gi",
		}
		w.dbs = append(w.dbs, d)
		if !updates {
			continue
		}
		kinds := rnd.Perm(3)[:1+rnd.IntN(2)]
		for _, k := range kinds {
			switch k {
			case 0:
				// Not replicas: dbkeeper runs one replica until it runs
				// replication.
				n := fmt.Sprint(100 + 50*rnd.IntN(3))
				pending[i] = append(pending[i], op{kind: "update", db: i, patch: fmt.Sprintf(`{"spec":{"parameters":{"max_connections":%q}}}`, n),
					what: "max_connections " + n, set: func(d *intent) { d.connections = n }})
			case 1:
				cpu := []string{"200m", "250m", "300m"}[rnd.IntN(3)]
				pending[i] = append(pending[i], op{kind: "update", db: i, patch: fmt.Sprintf(`{"spec":{"resources":{"requests":{"cpu":%q,"memory":"256Mi"}}}}`, cpu),
					what: "cpu " + cpu, set: func(d *intent) { d.cpu = cpu }})
			case 2:
				size := []string{"2Gi", "3Gi"}[rnd.IntN(2)]
				pending[i] = append(pending[i], op{kind: "update", db: i, patch: fmt.Sprintf(`{"spec":{"storage":{"size":%q}}}`, size),
					what: "storage " + size, set: func(d *intent) { d.size = size }})
			}
		}
	}
	if updates {
		// A fifth deleted, as many Retain as Delete.
		for _, i := range rnd.Perm(n) {
			if len(doomed) < n/5 && (countPolicy(w, doomed, w.dbs[i].policy) < (n/5+1)/2) {
				doomed[i] = true
			}
		}
	}
	created := 0
	for {
		var ready []op
		if created < n {
			ready = append(ready, op{kind: "create", db: created, what: "create"})
		}
		for i := range created {
			switch {
			case len(pending[i]) > 0:
				ready = append(ready, pending[i][0])
			case doomed[i] && !w.dbs[i].deleted:
				ready = append(ready, op{kind: "delete", db: i, what: "delete"})
			}
		}
		if len(ready) == 0 {
			break
		}
		o := ready[rnd.IntN(len(ready))]
		switch o.kind {
		case "create":
			created++
		case "update":
			pending[o.db] = pending[o.db][1:]
		case "delete":
			w.dbs[o.db].deleted = true
		}
		w.ops = append(w.ops, o)
	}
	for _, d := range w.dbs { // intents are applied as the ops run
		d.deleted = false
	}
	return w
}

func countPolicy(w *workload, chosen map[int]bool, p dbv1.DeletionPolicy) int {
	n := 0
	for i := range chosen {
		if w.dbs[i].policy == p {
			n++
		}
	}
	return n
}

// run applies ops in order, as a client that retries would, pausing up to
// pause between them, and returns the number of requests refused (webhook
// or API server down) and retried.
func (w *workload) run(ctx context.Context, h *harness, ops []op, pause time.Duration, rnd *rand.Rand, mu *sync.Mutex) (retried int, err error) {
	for _, o := range ops {
		d := w.dbs[o.db]
		var attempts int
		switch o.kind {
		case "create":
			db := newDatabase(w.namespace, d.name, d.engine, d.policy)
			attempts, err = h.createDatabase(ctx, db)
		case "update":
			attempts, err = h.patchDatabase(ctx, w.namespace, d.name, o.patch)
		case "delete":
			attempts, err = h.deleteDatabase(ctx, w.namespace, d.name)
		}
		retried += attempts - 1
		if err != nil {
			return retried, fmt.Errorf("%s %s: %w", o.what, d.name, err)
		}
		w.apply(o)
		if pause > 0 {
			mu.Lock()
			p := time.Duration(rnd.Int64N(int64(pause)))
			mu.Unlock()
			time.Sleep(p)
		}
	}
	return retried, nil
}

// apply records the effect of a successful op in the intents.
func (w *workload) apply(o op) {
	switch o.kind {
	case "delete":
		w.dbs[o.db].deleted = true
	case "update":
		o.set(w.dbs[o.db])
	}
}

// expectation returns what childProblems checks: the deleted Databases.
func (w *workload) expectation() expectation {
	exp := expectation{namespace: w.namespace, deleted: map[string]dbv1.DeletionPolicy{}}
	for _, d := range w.dbs {
		if d.deleted {
			exp.deleted[d.name] = d.policy
		}
	}
	return exp
}

// live returns the names of the Databases not deleted.
func (w *workload) live() map[string]bool {
	out := map[string]bool{}
	for _, d := range w.dbs {
		if !d.deleted {
			out[d.name] = true
		}
	}
	return out
}

// counts returns how many creates, updates and deletes the workload has.
func (w *workload) counts() (creates, updates, deletes int) {
	for _, o := range w.ops {
		switch o.kind {
		case "create":
			creates++
		case "update":
			updates++
		case "delete":
			deletes++
		}
	}
	return creates, updates, deletes
}

// checkSpecs checks that every live Database's spec is what the workload
// last asked for: no update was lost.
func (w *workload) checkSpecs(t *testing.T, h *harness) {
	t.Helper()
	list := &dbv1.DatabaseList{}
	if err := h.Client.List(context.Background(), list); err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dbv1.Database{}
	for i := range list.Items {
		if list.Items[i].Namespace == w.namespace {
			byName[list.Items[i].Name] = &list.Items[i]
		}
	}
	for _, d := range w.dbs {
		db, ok := byName[d.name]
		switch {
		case d.deleted && ok:
			t.Errorf("%s was deleted but exists", d.name)
		case d.deleted:
		case !ok:
			t.Errorf("%s is missing", d.name)
		default:
			s := db.Spec
			cpu := s.Resources.Requests[corev1.ResourceCPU]
			if ptr.Deref(s.Replicas, 0) != d.replicas || s.Parameters["max_connections"] != d.connections || cpu.Cmp(resource.MustParse(d.cpu)) != 0 ||
				s.Storage.Size == nil || s.Storage.Size.Cmp(resource.MustParse(d.size)) != 0 || s.Engine != d.engine || s.DeletionPolicy != d.policy {
				t.Errorf("%s: spec replicas %d max_connections %q cpu %s size %v engine %s policy %s; the workload asked for %+v",
					d.name, ptr.Deref(s.Replicas, 0), s.Parameters["max_connections"], cpu.String(), s.Storage.Size, s.Engine, s.DeletionPolicy, *d)
			}
		}
	}
}
