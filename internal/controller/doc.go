// Package controller holds the DatabaseReconciler: it reads a Database,
// guards against an invalid spec, applies the desired credentials Secret,
// Services and StatefulSet (writing only what differs from what dbkeeper
// already owns), and reports progress as kstatus conditions.
package controller
