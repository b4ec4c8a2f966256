package lease

import "time"

// DefaultMaxTTL is the longest lease a claim may ask for (--ttl) unless
// the operator configures another maximum (--max-ttl): a week.
const DefaultMaxTTL = 168 * time.Hour
