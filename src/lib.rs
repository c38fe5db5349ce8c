//! gateway-leader: leader election for Gateway API controllers.
