package rules

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// Defaults of the engine-independent fields of a DatabaseSpec.
const (
	// DefaultReplicas is the number of pods of a Database that names none.
	DefaultReplicas int32 = 1
	// DefaultDatabaseName is the database created when spec.databaseName is empty.
	DefaultDatabaseName = "app"
	// DefaultUsername is the account created when spec.username is empty.
	DefaultUsername = "app"
	// DefaultDeletionPolicy keeps the data when a Database is deleted.
	DefaultDeletionPolicy = dbv1.DeletionPolicyRetain
)

var (
	// defaultStorageSize is spec.storage.size when it is not set.
	defaultStorageSize = resource.MustParse("1Gi")
	// defaultRequests are the container requests of a resource for which
	// neither a request nor a limit is set.
	defaultRequests = []struct {
		name     corev1.ResourceName
		quantity resource.Quantity
	}{
		{corev1.ResourceCPU, resource.MustParse("100m")},
		{corev1.ResourceMemory, resource.MustParse("256Mi")},
	}
)

// Default fills in the fields of db the user left empty. It is engine-aware
// (version, image and port come from the engine catalog, and
// failoverTimeout is defaulted only for an engine dbkeeper replicates),
// idempotent, and
// never overwrites a value that is set. Fields that depend on an unknown
// engine or version are left empty for validation to report the cause.
func (r Rules) Default(db *dbv1.Database) {
	spec := &db.Spec
	if spec.Engine == "" {
		spec.Engine = catalog.DefaultEngine
	}
	if engine, ok := catalog.LookupEngine(spec.Engine); ok {
		if spec.Version == "" {
			spec.Version = engine.DefaultVersion
		}
		if spec.Image == "" {
			if image, err := engine.DefaultImage(r.registry(), spec.Version); err == nil {
				spec.Image = image
			}
		}
		if spec.Port == nil {
			spec.Port = ptr.To(engine.Port)
		}
		if spec.FailoverTimeout == nil && engine.MaxReplicas > 1 {
			spec.FailoverTimeout = &metav1.Duration{Duration: DefaultFailoverTimeout}
		}
	}
	if spec.Replicas == nil {
		spec.Replicas = ptr.To(DefaultReplicas)
	}
	if spec.Storage.Size == nil {
		spec.Storage.Size = ptr.To(defaultStorageSize.DeepCopy())
	}
	for _, d := range defaultRequests {
		defaultRequest(&spec.Resources, d.name, d.quantity)
	}
	if spec.DatabaseName == "" {
		spec.DatabaseName = DefaultDatabaseName
	}
	if spec.Username == "" {
		spec.Username = DefaultUsername
	}
	if spec.NetworkPolicy == "" {
		spec.NetworkPolicy = dbv1.NetworkPolicyManaged
	}
	if spec.DeletionPolicy == "" {
		spec.DeletionPolicy = DefaultDeletionPolicy
	}
	defaultBackup(db)
	defaultTLS(db)
}

// defaultRequest sets the request of a resource when neither its request nor
// its limit is set. With only a limit, Kubernetes defaults the request to the
// limit, which is what the user asked for.
func defaultRequest(res *corev1.ResourceRequirements, name corev1.ResourceName, quantity resource.Quantity) {
	if _, ok := res.Requests[name]; ok {
		return
	}
	if _, ok := res.Limits[name]; ok {
		return
	}
	if res.Requests == nil {
		res.Requests = corev1.ResourceList{}
	}
	res.Requests[name] = quantity.DeepCopy()
}

// DefaultUpdate defaults newDB, the Database an update would store, given
// oldDB, the one stored now (read only).
//
// Unlike the other defaults, the image depends on another field: the default
// image is stored in spec.image once defaulted, so a later version bump would
// keep running the old version's image (and fail validation). When the
// version changes and spec.image is still the catalog's default image of the
// old version from this registry, DefaultUpdate clears it so that it is
// defaulted anew for the new version. An image the user chose is kept.
func (r Rules) DefaultUpdate(oldDB, newDB *dbv1.Database) {
	if r.hasStaleDefaultImage(oldDB, newDB) {
		newDB.Spec.Image = ""
	}
	r.Default(newDB)
}

// hasStaleDefaultImage reports whether newDB changes the version but keeps
// the default image of oldDB's version.
func (r Rules) hasStaleDefaultImage(oldDB, newDB *dbv1.Database) bool {
	image := newDB.Spec.Image
	if image == "" || image != oldDB.Spec.Image {
		return false
	}
	name := effectiveEngine(&oldDB.Spec)
	if effectiveEngine(&newDB.Spec) != name {
		// Refused as an engine change; leave the image alone.
		return false
	}
	engine, ok := catalog.LookupEngine(name)
	if !ok {
		return false
	}
	oldVersion := effectiveVersion(engine, &oldDB.Spec)
	if effectiveVersion(engine, &newDB.Spec) == oldVersion {
		return false
	}
	defaultImage, err := engine.DefaultImage(r.registry(), oldVersion)
	return err == nil && image == defaultImage
}
