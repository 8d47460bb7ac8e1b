package faults

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/dbkeeper/dbkeeper/internal/desired"
)

// recorder watches, from the start of the run, every Secret and
// PersistentVolumeClaim dbkeeper manages in any namespace. It remembers the
// first password of each credentials Secret and counts every later change of
// it, and remembers every claim and whether it was deleted. Its informers
// relist after an API server restart, so a fault cannot hide a change that
// lasted.
type recorder struct {
	mu sync.Mutex
	// first is the first password seen per Secret (namespace/name).
	first map[string]string
	// changed counts the observations of a password other than the first.
	changed map[string]int
	// secretData is every value seen in a credentials Secret, for the leak
	// scan, keyed by "namespace/name key".
	secretData map[string]string
	// claims are all claims seen, by namespace/name.
	claims map[string]*claimRecord

	stopCh chan struct{}
}

// claimRecord is what the recorder knows of one claim.
type claimRecord struct {
	namespace, name string
	// instance is the Database the claim belongs to.
	instance string
	deleted  bool
}

func startRecorder(cs kubernetes.Interface) (*recorder, error) {
	r := &recorder{
		first:      map[string]string{},
		changed:    map[string]int{},
		secretData: map[string]string{},
		claims:     map[string]*claimRecord{},
		stopCh:     make(chan struct{}),
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = desired.LabelManagedBy + "=" + desired.ManagedByValue
	}))
	secrets := factory.Core().V1().Secrets().Informer()
	if _, err := secrets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.secret(obj) },
		UpdateFunc: func(_, obj any) { r.secret(obj) },
	}); err != nil {
		return nil, err
	}
	claims := factory.Core().V1().PersistentVolumeClaims().Informer()
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.claim(obj, false) },
		UpdateFunc: func(_, obj any) { r.claim(obj, false) },
		DeleteFunc: func(obj any) { r.claim(obj, true) },
	}); err != nil {
		return nil, err
	}
	factory.Start(r.stopCh)
	for typ, ok := range factory.WaitForCacheSync(r.stopCh) {
		if !ok {
			return nil, fmt.Errorf("the recorder's %v informer did not sync", typ)
		}
	}
	return r, nil
}

func (r *recorder) stop() { close(r.stopCh) }

func (r *recorder) secret(obj any) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return
	}
	key := s.Namespace + "/" + s.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range s.Data {
		r.secretData[key+" "+k] = string(v)
	}
	// The credentials Secret's password, or the instance Secret's
	// superuser password: each must stay the first one generated.
	password := string(s.Data[desired.SecretKeyPassword])
	if password == "" {
		password = string(s.Data[desired.SecretKeySuperuserPassword])
	}
	if password == "" {
		return
	}
	first, seen := r.first[key]
	switch {
	case !seen:
		r.first[key] = password
	case first != password:
		r.changed[key]++
	}
}

func (r *recorder) claim(obj any, deleted bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pvc, ok := obj.(*corev1.PersistentVolumeClaim)
	if !ok {
		return
	}
	key := pvc.Namespace + "/" + pvc.Name
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.claims[key]
	if c == nil {
		c = &claimRecord{namespace: pvc.Namespace, name: pvc.Name, instance: pvc.Labels[desired.LabelInstance]}
		r.claims[key] = c
	}
	if deleted {
		c.deleted = true
	}
}

// passwords returns the first password of every Secret of namespace, by name.
func (r *recorder) passwords(namespace string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]string{}
	for key, p := range r.first {
		if ns, name, ok := cutKey(key); ok && ns == namespace {
			out[name] = p
		}
	}
	return out
}

// passwordChanges returns how many times a Secret of namespace was seen with
// a password other than its first, and which Secrets.
func (r *recorder) passwordChanges(namespace string) (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	var names []string
	for key, n := range r.changed {
		if ns, name, ok := cutKey(key); ok && ns == namespace && n > 0 {
			total += n
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return total, names
}

// claimsOf returns the claims of namespace seen so far.
func (r *recorder) claimsOf(namespace string) []claimRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []claimRecord
	for _, c := range r.claims {
		if c.namespace == namespace {
			out = append(out, *c)
		}
	}
	slices.SortFunc(out, func(a, b claimRecord) int { return strings.Compare(a.name, b.name) })
	return out
}

// allSecretData returns every value seen in a credentials Secret, keyed by
// "namespace/name key".
func (r *recorder) allSecretData() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.secretData)
}

func cutKey(key string) (namespace, name string, ok bool) {
	return strings.Cut(key, "/")
}
