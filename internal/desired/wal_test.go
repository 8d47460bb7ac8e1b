package desired

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestTheDefaultBoundOfASlotsWALFollowsTheVolumeTheStatefulSetWasCreatedWith(t *testing.T) {
	// The StatefulSet was created at 1Gi; spec.storage.size grew to 10Gi
	// since, which grows the claims but not the claim template.
	db := newDatabase(dbv1.EnginePostgres, fixture.WithStorageSize("10Gi"))
	created := resource.MustParse("1Gi")
	opts := testOptions
	opts.WALKeepVolume = &created
	args := StatefulSet(db, opts).Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "max_slot_wal_keep_size=256MB") {
		t.Errorf("args = %q, want the default of the 1Gi volume the StatefulSet was created with: growing the volume restarts no pod", args)
	}
	// A new StatefulSet takes spec.storage.size.
	if args := StatefulSet(db, testOptions).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "max_slot_wal_keep_size=2560MB") {
		t.Errorf("args = %q, want a quarter of 10Gi", args)
	}
	// mysql has no such setting.
	if args := StatefulSet(newDatabase(dbv1.EngineMySQL), opts).Spec.Template.Spec.Containers[0].Args; slices.ContainsFunc(args, func(a string) bool { return len(a) > 20 && a[:20] == "max_slot_wal_keep_si" }) {
		t.Errorf("mysql args = %q", args)
	}
}
