package controller

import (
	"os"
	"testing"

	"github.com/dbkeeper/dbkeeper/internal/testenv"
)

// apiServer is the one API server of this package's tests, internal and
// external, started by the first test that needs it.
var apiServer testenv.Shared

func TestMain(m *testing.M) { os.Exit(apiServer.Run(m)) }
