package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/devmsg/devmsg/sdk/device"
)

func main() {
	broker := flag.String("broker", "tcp://localhost:1883", "MQTT address of the service")
	app := flag.String("app", os.Getenv("DEVMSG_APP_KEY"), "app key (env DEVMSG_APP_KEY)")
	name := flag.String("device", os.Getenv("DEVMSG_DEVICE"), "device name (env DEVMSG_DEVICE)")
	secret := flag.String("secret", os.Getenv("DEVMSG_DEVICE_SECRET"), "device secret (env DEVMSG_DEVICE_SECRET)")
	telemetry := flag.Duration("telemetry", 0, "publish {\"uptime_s\":N} to up/telemetry at QoS 1 every interval; 0 never")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	d, err := device.Connect(ctx, device.Config{
		Broker: *broker, AppKey: *app, DeviceName: *name, DeviceSecret: *secret,
		SDKVersion: "devmsg-go", AppVersion: "example-1",
		OnMessage: func(m device.Message) {
			fmt.Printf("message %d: %s\n", m.ID, m.Body) // acknowledged when this returns
		},
		OnDesired: func(doc device.Desired) {
			fmt.Printf("desired version %d:", doc.Version)
			for k, v := range doc.Properties {
				fmt.Printf(" %s=%s", k, v)
			}
			fmt.Println()
		},
		OnConnectionLost: func(err error) { log.Printf("connection lost (reconnecting): %v", err) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	start := time.Now()
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	var tick <-chan time.Time // nil: never
	if *telemetry > 0 {
		tt := time.NewTicker(*telemetry)
		defer tt.Stop()
		tick = tt.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := d.PublishUp(pctx, "telemetry", fmt.Appendf(nil, `{"uptime_s":%d}`, int(time.Since(start).Seconds())), 1)
			cancel()
			if err != nil {
				log.Printf("telemetry: %v", err) // not stored: the next reading follows
			}
		case <-t.C:
			v, err := d.Report(ctx, map[string]any{"uptime_s": int(time.Since(start).Seconds())}, 0)
			if err != nil {
				log.Printf("report: %v", err)
				continue
			}
			fmt.Printf("reported uptime_s as version %d\n", v)
		}
	}
}
