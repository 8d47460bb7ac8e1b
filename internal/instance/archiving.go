package instance

import (
	"time"

	"github.com/dbkeeper/dbkeeper/internal/archiver"
)

// Archiving is, in a pod with the backup sidecar, what the agent last saw
// of continuous archiving: the sidecar's GET /v1/status, pg_stat_archiver,
// and pg_wal against the data volume. The agent gathers it every
// archivingInterval on a goroutine and connection of its own, so that a
// slow sidecar or query never delays the lease and fencing logic.
type Archiving struct {
	// ObservedSecondsAgo is how long ago, by the agent's clock, this was
	// gathered.
	ObservedSecondsAgo float64 `json:"observedSecondsAgo"`
	// SidecarError is why the sidecar did not answer, "" when it did.
	SidecarError string `json:"sidecarError,omitempty"`
	// Sidecar is the sidecar's answer: barman-cloud's reason for the last
	// failure (LastError) and the consecutive failures.
	Sidecar *archiver.Status `json:"sidecar,omitempty"`
	// StatsError is why pg_stat_archiver could not be read (the server is
	// down), "" when it was.
	StatsError string `json:"statsError,omitempty"`
	// ArchivedCount, LastArchivedWAL, LastArchivedTime, FailedCount,
	// LastFailedWAL and LastFailedTime are pg_stat_archiver's (counts since
	// its last reset).
	ArchivedCount    int64      `json:"archivedCount"`
	LastArchivedWAL  string     `json:"lastArchivedWAL,omitempty"`
	LastArchivedTime *time.Time `json:"lastArchivedTime,omitempty"`
	FailedCount      int64      `json:"failedCount"`
	LastFailedWAL    string     `json:"lastFailedWAL,omitempty"`
	LastFailedTime   *time.Time `json:"lastFailedTime,omitempty"`
	// ReadySegments is the number of files in pg_wal/archive_status waiting
	// to be archived (*.ready).
	ReadySegments int `json:"readySegments"`
	// WALBytes is the size of pg_wal's files; VolumeFreeBytes and
	// VolumeBytes are the data volume's space available to the server and
	// its size (statfs); 0 when unknown (DiskError says why).
	WALBytes        int64  `json:"walBytes"`
	VolumeFreeBytes int64  `json:"volumeFreeBytes"`
	VolumeBytes     int64  `json:"volumeBytes"`
	DiskError       string `json:"diskError,omitempty"`
}
