"""Solvers of the Transformer PDE: tokens (:mod:`.particles`), finite volumes on the sphere
(:mod:`.fv`, :mod:`.mesh`, its point masses :mod:`.atoms`), the registry of time steppers
(:mod:`.integrators`), the coupled mesh + particles solver (:mod:`.coupled`) and distances
between the two (:mod:`.distances`)."""
