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
