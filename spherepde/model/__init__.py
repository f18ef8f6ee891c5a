"""The model (docs/model.md): the weight processes Theta_t (:mod:`.weights`), the velocity
field of the heads (:mod:`.velocity`), and energy, dissipation and the energy-dissipation
identity (:mod:`.energy`), clusters of a weighted point cloud (:mod:`.clusters`)."""
