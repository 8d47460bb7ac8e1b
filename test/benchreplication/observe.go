package main

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// observer watches the Database, its pods and its client Service's
// EndpointSlices, and keeps each change with the moment the watch
// delivered it: the phases of a change of primary are read from these.
type observer struct {
	mu   sync.Mutex
	db   []dbObs
	pods []podObs
	eps  []endpointsObs
	// slices are the ready addresses of each EndpointSlice.
	slices map[string][]string
}

func (o *observer) start(ctx context.Context, cl client.WithWatch, name string) {
	o.slices = map[string][]string{}
	go o.watch(ctx, cl, &dbv1.DatabaseList{}, []client.ListOption{client.InNamespace(ns)}, func(at time.Time, ev watch.Event) {
		db, ok := ev.Object.(*dbv1.Database)
		if !ok || db.Name != name {
			return
		}
		st := db.Status
		o.db = append(o.db, dbObs{At: at, CurrentPrimary: st.CurrentPrimary, TargetPrimary: st.TargetPrimary, Term: st.Term, PrimaryTerm: st.PrimaryTerm})
	})
	go o.watch(ctx, cl, &corev1.PodList{}, []client.ListOption{client.InNamespace(ns), client.MatchingLabels{instLabel: name}}, func(at time.Time, ev watch.Event) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return
		}
		o.pods = append(o.pods, podObs{At: at, Pod: p.Name, UID: string(p.UID), Role: p.Labels[roleLabel], IP: p.Status.PodIP, Deleted: ev.Type == watch.Deleted})
	})
	go o.watch(ctx, cl, &discoveryv1.EndpointSliceList{}, []client.ListOption{client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name}}, func(at time.Time, ev watch.Event) {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		var ips []string
		if ev.Type != watch.Deleted {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready == nil || *e.Conditions.Ready {
					ips = append(ips, e.Addresses...)
				}
			}
		}
		o.slices[s.Name] = ips
		var all []string
		for _, v := range o.slices {
			all = append(all, v...)
		}
		slices.Sort(all)
		o.eps = append(o.eps, endpointsObs{At: at, IPs: all})
	})
}

// watch runs a watch of list until ctx ends, starting it again whenever
// the API server closes it, and hands each event to record under the lock.
func (o *observer) watch(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts []client.ListOption, record func(time.Time, watch.Event)) {
	for ctx.Err() == nil {
		w, err := cl.Watch(ctx, list, opts...)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error || ev.Type == watch.Bookmark {
				continue
			}
			at := time.Now()
			o.mu.Lock()
			record(at, ev)
			o.mu.Unlock()
		}
		w.Stop()
	}
}

// snapshot returns copies of what the watches saw so far.
func (o *observer) snapshot() ([]dbObs, []podObs, []endpointsObs) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.db), slices.Clone(o.pods), slices.Clone(o.eps)
}
