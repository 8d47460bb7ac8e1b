package main

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

func TestRequestsCPU(t *testing.T) {
	sts := func(containers ...corev1.Container) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{}
		s.Spec.Template.Spec.Containers = containers
		return s
	}
	requesting := func(name, cpu string) corev1.Container {
		return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}
	}
	want := *resource.NewMilliQuantity(101, resource.DecimalSI)
	tests := []struct {
		name string
		sts  *appsv1.StatefulSet
		ok   bool
	}{
		{"the database container requests it", sts(requesting("postgres", "101m")), true},
		{"the same quantity written otherwise", sts(requesting("postgres", "0.101")), true},
		{"the previous value", sts(requesting("postgres", "100m")), false},
		{"another container requests it", sts(requesting("postgres", "100m"), requesting("sidecar", "101m")), false},
		{"no request", sts(corev1.Container{Name: "postgres"}), false},
		{"no database container", sts(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := requestsCPU(tt.sts, want); got != tt.ok {
				t.Errorf("requestsCPU = %v, want %v", got, tt.ok)
			}
		})
	}
}

// fakeController copies the probe Databases' cpu requests into the
// StatefulSets it hands the prober, after delay, as the reconciler and the
// watch would; reflect false hands over only StatefulSets with the old
// request, as an update of something else would.
func fakeController(t *testing.T, ctx context.Context, c client.Client, p *prober, delay time.Duration, reflect bool) {
	t.Helper()
	go func() {
		seen := map[string]string{}
		for ctx.Err() == nil {
			for i := range probeDatabases {
				db := &dbv1.Database{}
				if err := c.Get(ctx, client.ObjectKey{Namespace: nsDbkeeper, Name: probeName(i)}, db); err != nil {
					continue
				}
				cpu := db.Spec.Resources.Requests[corev1.ResourceCPU]
				if seen[db.Name] == cpu.String() {
					continue
				}
				seen[db.Name] = cpu.String()
				if !reflect {
					cpu = resource.MustParse("100m")
				}
				sts := &appsv1.StatefulSet{}
				sts.Namespace, sts.Name = nsDbkeeper, probeStatefulSet(db.Name)
				sts.Spec.Template.Spec.Containers = []corev1.Container{{Name: "postgres", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: cpu}}}}
				go func() {
					time.Sleep(delay)
					p.observe(sts, time.Now())
				}()
			}
			time.Sleep(time.Millisecond)
		}
	}()
}

func probeClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := dbv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme)
	for i := range probeDatabases {
		db := benchDatabase(nsDbkeeper, 0)
		db.Name = probeName(i)
		db.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
		b.WithObjects(db)
	}
	return b.Build()
}

func TestProbeSample(t *testing.T) {
	for _, tt := range []struct {
		name    string
		reflect bool
		ok      bool
	}{
		{"the StatefulSet carries the change", true, true},
		{"a StatefulSet update without the change is not it", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			c := probeClient(t)
			p := newProberWith(c)
			p.timeout = 300 * time.Millisecond
			const delay = 50 * time.Millisecond
			fakeController(t, ctx, c, p, delay, tt.reflect)
			seconds, ok, err := p.sample(ctx, probeName(1))
			if err != nil {
				t.Fatal(err)
			}
			if ok != tt.ok {
				t.Fatalf("seen %v, want %v", ok, tt.ok)
			}
			if ok && (seconds < delay.Seconds()*0.9 || seconds > p.timeout.Seconds()) {
				t.Errorf("%.3f s from the response to the change, want about %s", seconds, delay)
			}
			db := &dbv1.Database{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: nsDbkeeper, Name: probeName(1)}, db); err != nil {
				t.Fatal(err)
			}
			if got := db.Spec.Resources.Requests[corev1.ResourceCPU]; got.String() != "101m" {
				t.Errorf("spec.resources.requests.cpu %s after the patch, want 101m", got.String())
			}
			if got := db.Spec.Resources.Requests[corev1.ResourceMemory]; got.String() != "256Mi" {
				t.Errorf("spec.resources.requests.memory %s after the patch, want it kept at 256Mi", got.String())
			}
			p.mu.Lock()
			pending := p.pending[probeStatefulSet(probeName(1))]
			p.mu.Unlock()
			if pending != nil {
				t.Errorf("probe Database %s not free again after its sample: a change of %s is still pending", probeName(1), pending.cpu.String())
			}
		})
	}
}

// A change slower than the interval skips no probe Database with a change
// pending, and every change is a new value.
func TestProbeConverging(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c := probeClient(t)
	p := newProberWith(c)
	fakeController(t, ctx, c, p, 30*time.Millisecond, true)
	stop := p.converging(ctx, 5*time.Millisecond, 12, t.Logf)
	// Until the twelfth change is issued: stop waits for those under way.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		issued := p.next - 101
		p.mu.Unlock()
		if issued >= 12 || time.Now().After(deadline) {
			break
		}
	}
	f, err := stop()
	if err != nil {
		t.Fatal(err)
	}
	if f.Samples != 12 || f.Unseen != 0 || f.Failed != 0 {
		t.Errorf("samples %d, unseen %d, failed %d; want 12, 0, 0", f.Samples, f.Unseen, f.Failed)
	}
	if f.Skipped == 0 {
		t.Errorf("no tick skipped, though a change takes 30 ms, %d probe Databases and a tick every 5 ms", probeDatabases)
	}
	if p.next != 101+12 { // no sample under way any more: no lock needed
		t.Errorf("next request %dm, want %dm: one new value per change", p.next, 101+12)
	}
	if f.P50 < 0.025 {
		t.Errorf("p50 %.3f s, want at least the 30 ms the change took", f.P50)
	}
}
