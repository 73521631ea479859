package cartools

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Car is a simulated vehicle that executes the tool set's calls, for the
// demo and tests: each call changes its state, and the result is the text
// an app would send back to the model as the tool's answer.
type Car struct {
	Temperature int
	Fan         int
	Defrost     bool
	Windows     map[string]string // window → "open" or "closed"
	SeatHeaters map[string]bool
	Destination string
	Playing     string // what plays; "" when nothing
	Paused      bool
	Volume      int
	Timers      []int // minutes
	Calling     string
	Locked      bool
	Fuel        int // percent
	Battery     int // percent
}

// NewCar returns a car parked with everything off and closed.
func NewCar() *Car {
	c := &Car{Temperature: 21, Fan: 1, Volume: 10, Locked: true, Fuel: 64, Battery: 88,
		Windows: map[string]string{}, SeatHeaters: map[string]bool{}}
	for _, w := range []string{"driver", "passenger", "rear left", "rear right"} {
		c.Windows[w] = "closed"
	}
	for _, s := range []string{"driver", "passenger", "rear"} {
		c.SeatHeaters[s] = false
	}
	return c
}

// Call executes one tool call. The arguments are checked as the schema
// says, so a malformed call (from an engine without grammar constraints)
// fails here rather than moving the car.
func (c *Car) Call(name, arguments string) (string, error) {
	var a map[string]any
	if err := json.Unmarshal([]byte(arguments), &a); err != nil {
		return "", fmt.Errorf("%s: arguments %q: %v", name, arguments, err)
	}
	num := func(key string, lo, hi int) (int, error) {
		f, ok := a[key].(float64)
		if !ok || f != float64(int(f)) || int(f) < lo || int(f) > hi {
			return 0, fmt.Errorf("%s: %s must be an integer in %d..%d, got %v", name, key, lo, hi, a[key])
		}
		return int(f), nil
	}
	str := func(key string, allowed ...string) (string, error) {
		s, ok := a[key].(string)
		if !ok || s == "" {
			return "", fmt.Errorf("%s: %s must be a string, got %v", name, key, a[key])
		}
		if len(allowed) > 0 && !contains(allowed, s) {
			return "", fmt.Errorf("%s: %s %q is not one of %s", name, key, s, strings.Join(allowed, ", "))
		}
		return s, nil
	}
	flag := func(key string) (bool, error) {
		v, ok := a[key].(bool)
		if !ok {
			return false, fmt.Errorf("%s: %s must be a boolean, got %v", name, key, a[key])
		}
		return v, nil
	}
	var err error
	switch name {
	case "set_temperature":
		if c.Temperature, err = num("temperature", 16, 30); err == nil {
			return fmt.Sprintf("cabin set to %d degrees", c.Temperature), nil
		}
	case "set_fan_speed":
		if c.Fan, err = num("level", 0, 5); err == nil {
			return fmt.Sprintf("fan at level %d", c.Fan), nil
		}
	case "set_defrost":
		if c.Defrost, err = flag("on"); err == nil {
			return "defrost " + onOff(c.Defrost), nil
		}
	case "set_window":
		var w, act string
		if w, err = str("window", "driver", "passenger", "rear left", "rear right", "all"); err != nil {
			break
		}
		if act, err = str("action", "open", "close"); err != nil {
			break
		}
		state := map[string]string{"open": "open", "close": "closed"}[act]
		for k := range c.Windows {
			if w == "all" || w == k {
				c.Windows[k] = state
			}
		}
		return fmt.Sprintf("%s window %s", w, state), nil
	case "set_seat_heater":
		var seat string
		var on bool
		if seat, err = str("seat", "driver", "passenger", "rear"); err != nil {
			break
		}
		if on, err = flag("on"); err != nil {
			break
		}
		c.SeatHeaters[seat] = on
		return fmt.Sprintf("%s seat heater %s", seat, onOff(on)), nil
	case "navigate_to":
		if c.Destination, err = str("destination"); err == nil {
			return "route to " + c.Destination + " started", nil
		}
	case "play_media":
		if c.Playing, err = str("query"); err == nil {
			c.Paused = false
			return "playing " + c.Playing, nil
		}
	case "media_control":
		var act string
		if act, err = str("action", "pause", "resume", "next", "previous"); err == nil {
			switch act {
			case "pause":
				c.Paused = true
			case "resume":
				c.Paused = false
			}
			return "media " + act, nil
		}
	case "set_volume":
		if c.Volume, err = num("level", 0, 30); err == nil {
			return fmt.Sprintf("volume %d", c.Volume), nil
		}
	case "set_timer":
		var m int
		if m, err = num("minutes", 1, 180); err == nil {
			c.Timers = append(c.Timers, m)
			return fmt.Sprintf("timer set for %d minutes", m), nil
		}
	case "call_contact":
		if c.Calling, err = str("name"); err == nil {
			return "calling " + c.Calling, nil
		}
	case "get_vehicle_status":
		var item string
		if item, err = str("item", "fuel", "battery", "range", "tire_pressure", "oil", "doors"); err == nil {
			return c.status(item), nil
		}
	case "lock_doors":
		if c.Locked, err = flag("locked"); err == nil {
			return "doors " + map[bool]string{true: "locked", false: "unlocked"}[c.Locked], nil
		}
	default:
		return "", fmt.Errorf("no tool %q", name)
	}
	return "", err
}

func (c *Car) status(item string) string {
	switch item {
	case "fuel":
		return fmt.Sprintf("fuel at %d percent", c.Fuel)
	case "battery":
		return fmt.Sprintf("battery at %d percent", c.Battery)
	case "range":
		return fmt.Sprintf("range %d miles", c.Fuel*4)
	case "tire_pressure":
		return "all tires at 35 psi"
	case "oil":
		return "oil life 62 percent"
	}
	return "doors " + map[bool]string{true: "locked", false: "unlocked"}[c.Locked]
}

// String is the car's state on one line.
func (c *Car) String() string {
	var open, heated []string
	for k, v := range c.Windows {
		if v == "open" {
			open = append(open, k)
		}
	}
	for k, v := range c.SeatHeaters {
		if v {
			heated = append(heated, k)
		}
	}
	sort.Strings(open)
	sort.Strings(heated)
	media := "off"
	if c.Playing != "" {
		media = c.Playing
		if c.Paused {
			media += " (paused)"
		}
	}
	return fmt.Sprintf("%d°C fan %d defrost %s | windows open: %s | seat heat: %s | nav: %s | media: %s vol %d | timers %v | call: %s | %s",
		c.Temperature, c.Fan, onOff(c.Defrost), list(open), list(heated), orNone(c.Destination), media, c.Volume, c.Timers, orNone(c.Calling),
		map[bool]string{true: "locked", false: "unlocked"}[c.Locked])
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func list(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
