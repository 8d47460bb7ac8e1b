package v1alpha1

// Annotations of a Database that ask dbkeeper for something.
const (
	// AnnotationReclone authorises one standby to replace its data
	// directory with a new clone of the primary when it cannot follow the
	// primary for a reason that is not a proven fork (the Stalled
	// condition's reasons NotStreaming, RewindFailed, SlotInvalidated,
	// CloneFailed). Its value is "<pod>=<nonce>": the pod, and any value
	// that differs from the last authorisation, for example the time:
	//
	//	kubectl annotate database orders --overwrite dbkeeper.io/reclone=orders-2=$(date +%s)
	//
	// The controller passes the whole value to that pod's instance agent
	// alone, which re-clones once per distinct value. A re-clone discards
	// what the standby holds that the primary lacks.
	AnnotationReclone = "dbkeeper.io/reclone"
)

// Annotations of other objects that dbkeeper reads.
const (
	// AnnotationAdopt, on an object whose name a Database's child takes
	// (a Secret, Service, StatefulSet, PodDisruptionBudget, NetworkPolicy
	// or cert-manager Certificate), hands it over to the Database whose
	// UID is its value. dbkeeper writes only to children it created
	// itself, which carry its controller owner reference; any other
	// object of a child's name makes the Database Stalled (reason
	// ForeignObject) and is left as it is. Whoever may write the object
	// hands it over, for example to move an existing Secret into a new
	// Database:
	//
	//	kubectl annotate secret orders-credentials dbkeeper.io/adopt=$(kubectl get database orders -o jsonpath='{.metadata.uid}')
	//
	// dbkeeper then takes it as its own child: it sets its controller
	// owner reference, labels and the fields it owns (a Secret's
	// password is kept), and the garbage collector deletes it with the
	// Database. The UID names one Database: another of the same name,
	// made later, is not handed the object.
	AnnotationAdopt = "dbkeeper.io/adopt"
)
