package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/devcluster"
)

// The failover under load: while the operator converges -load other
// Databases, on devcluster's fake (kwok) node, the replicated Database on
// the real node loses its primary pod, as in the delete-pod fault. Its
// write pause is compared with the unloaded delete-pod runs of the same
// report: the goal is at most 2 s more (issue 25). The operator takes a
// replicated Database's next look ahead of routine work in its queue
// (internal/controller/priority.go); this measures whether that holds on
// a real cluster, where the same two cores also serve the API server,
// etcd, kwok and the load's reconciles.
//
// Each run begins a wave of routine work, the kind that fills the queue:
// odd runs create the -load Databases, even runs delete them. The fault
// comes -before seconds later, while the wave's reconciles wait; the run
// records the queue's depth and how many of the load's Databases were
// Ready then.

const (
	// loadNamespace holds the load's Databases, kept on the fake node.
	loadNamespace = "bench-load"
	// nodeSelectorAnnotation keeps a namespace's pods on matching nodes
	// (the API server's PodNodeSelector admission plugin).
	nodeSelectorAnnotation = "scheduler.alpha.kubernetes.io/node-selector"
	// loadWorkers create or delete the load's Databases in parallel.
	loadWorkers = 16
)

// fakeNode is devcluster's first fake node, where the load runs.
const fakeNode = "kwok-node-0"

// namespaceManifest is a namespace whose pods stay on node.
func namespaceManifest(name, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %s
  annotations:
    %s: kubernetes.io/hostname=%s
`, name, nodeSelectorAnnotation, node)
}

// loadDatabase is the i-th Database of the load: one postgres 17 replica
// on kwok's volumes, every other field defaulted, as make bench creates.
func loadDatabase(i int) *dbv1.Database {
	return &dbv1.Database{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%05d", i), Namespace: loadNamespace},
		Spec: dbv1.DatabaseSpec{
			Engine:  dbv1.EnginePostgres,
			Version: "17",
			Storage: dbv1.StorageSpec{StorageClassName: new(devcluster.KwokStorageClass)},
		},
	}
}

// wave is the routine work one run of the failover under load begins.
type wave struct {
	create bool
	done   chan error
}

// startWave creates (odd runs) or deletes (even runs) the load's
// Databases in the background. It first waits for the previous wave's
// calls to end, so that a run's wave is its own.
func (b *bench) startWave(ctx context.Context, index int) error {
	if b.wave != nil {
		if err := <-b.wave.done; err != nil {
			return fmt.Errorf("the previous wave: %w", err)
		}
		b.wave = nil
	}
	w := &wave{create: index%2 == 1, done: make(chan error, 1)}
	b.wave = w
	go func() {
		jobs := make(chan int)
		errs := make(chan error, loadWorkers)
		var wg sync.WaitGroup
		for range loadWorkers {
			wg.Go(func() {
				var first error
				for i := range jobs {
					if first != nil {
						continue
					}
					db := loadDatabase(i)
					var err error
					if w.create {
						err = b.cl.Create(ctx, db)
					} else {
						err = client.IgnoreNotFound(b.cl.Delete(ctx, db))
					}
					if err != nil && (!w.create || !apierrors.IsAlreadyExists(err)) {
						first = fmt.Errorf("%s: %w", db.Name, err)
					}
				}
				errs <- first
			})
		}
		for i := range b.opts.load {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		close(errs)
		var all []error
		for err := range errs {
			all = append(all, err)
		}
		w.done <- errors.Join(all...)
	}()
	return nil
}

// loadState says how the load stands at the fault: how many of its
// Databases exist and are Ready, and the depth of the operator's queue.
func (b *bench) loadState(ctx context.Context) (*loadAtFault, error) {
	list := &dbv1.DatabaseList{}
	if err := b.cl.List(ctx, list, client.InNamespace(loadNamespace)); err != nil {
		return nil, err
	}
	s := &loadAtFault{Databases: len(list.Items)}
	for _, db := range list.Items {
		if meta.IsStatusConditionTrue(db.Status.Conditions, dbv1.ConditionReady) {
			s.Ready++
		}
	}
	depth, err := queueDepth(ctx, "http://"+b.manager.MetricsAddr+"/metrics")
	if err != nil {
		return nil, err
	}
	s.QueueDepth = depth
	if b.wave != nil && b.wave.create {
		s.Wave = "create"
	} else {
		s.Wave = "delete"
	}
	return s, nil
}

// queueDepth is the Database controller's work queue depth, summed over
// its priorities, from the manager's metrics.
func queueDepth(ctx context.Context, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseQueueDepth(bufio.NewScanner(resp.Body))
}

// parseQueueDepth sums the samples of workqueue_depth whose name label is
// the Database controller's.
func parseQueueDepth(sc *bufio.Scanner) (float64, error) {
	var sum float64
	found := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "workqueue_depth{") || !strings.Contains(line, `name="database"`) {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, errors.New(`no workqueue_depth sample with name="database" in the manager's metrics`)
	}
	return sum, nil
}

// waitWaveDone waits for the last wave's calls, at the end of the runs.
func (b *bench) waitWaveDone(timeout time.Duration) error {
	if b.wave == nil {
		return nil
	}
	select {
	case err := <-b.wave.done:
		b.wave = nil
		return err
	case <-time.After(timeout):
		return fmt.Errorf("the last wave's calls did not end within %v", timeout)
	}
}
