from spherepde.cli.main import main

raise SystemExit(main())
