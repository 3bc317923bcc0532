package job_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/devmsg/devmsg/internal/idgen"
	"github.com/devmsg/devmsg/job"
	"github.com/devmsg/devmsg/store/memory"
)

// slowTargets is the memory store reading a tag's targets slowly, as a
// real store does for a large fleet: it widens the time between a
// create's count of the active jobs and its write.
type slowTargets struct {
	*memory.Store
}

func (s slowTargets) EnabledNames(ctx context.Context, appKey, tag string) ([]string, error) {
	time.Sleep(20 * time.Millisecond)
	return s.Store.EnabledNames(ctx, appKey, tag)
}

// Creates made at once must not all count the same active jobs: an app
// never gets more than job.MaxActive jobs scheduled, running or paused.
func TestConcurrentCreatesKeepTheActiveLimit(t *testing.T) {
	f := newFixture(t, 4)
	ids, err := idgen.New(1)
	if err != nil {
		t.Fatal(err)
	}
	svc := job.NewService(slowTargets{f.st}, ids, f.runner)
	svc.SetClock(f.clock)
	s := spec(job.Target{All: true})
	s.StartAt = f.clock().Add(time.Hour).Unix() // scheduled: stays active
	const tries = 3 * job.MaxActive
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refused := 0, 0
	for range tries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := svc.Create(context.Background(), f.app, s, 0, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errors.Is(err, job.ErrTooMany):
				refused++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if created != job.MaxActive || refused != tries-job.MaxActive {
		t.Fatalf("%d concurrent creates: %d created, %d refused; want %d created", tries, created, refused, job.MaxActive)
	}
}
